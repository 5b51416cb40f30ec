/* Built only by the test layout/wrong-way-refused: a ledger-level library
 * that calls the meter, which sits above it, through a hand-written
 * declaration. Its link check must fail with an undefined reference. */
struct tally_consumer;
void tally_consumer_destroy(struct tally_consumer *c);
void wrong_way_call(void);

void wrong_way_call(void)
{
    tally_consumer_destroy(0);
}
