/* Linked with one module as a whole archive and only the modules it declares
 * below it (CMakeLists.txt, tally_module): an undefined reference here is a
 * dependency that runs the wrong way. */
int main(void)
{
    return 0;
}
