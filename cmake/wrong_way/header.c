/* Built only by the test layout/wrong-way-refused: a ledger-level library
 * that includes the meter's header. It must not compile: the meter's headers
 * are not on the ledger's include path. */
#include "tally/meter.h"
