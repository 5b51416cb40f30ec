/* Module placeholder: keeps the library non-empty until its first source lands. Delete once the module has real sources. */
typedef int tally_meter_placeholder;
