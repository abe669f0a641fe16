/* Unit tests for src/core/fault, the table of fault-injection points. */
#include "core/fault.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static void test_fault(void) {
    /* Armed from the environment before the first call (main sets it). */
    CHECK(fault_hit(FAULT_FAIL_STEP, 0) == 0, "other rank's hits do not count");
    CHECK(fault_hit(FAULT_FAIL_STEP, 1) == 0 && fault_hit(FAULT_FAIL_STEP, 1) == 0,
          "first two hits of rank 1");
    CHECK(fault_hit(FAULT_FAIL_STEP, 1) == 1, "third hit of rank 1 fires");
    CHECK(fault_hit(FAULT_FAIL_STEP, 1) == 0, "fires once");
    CHECK(fault_arg(FAULT_FAIL_STEP, 1) == 3, "fault_arg");
    CHECK(fault_hit(FAULT_KILL_IN_SAVE, 4) == 0 && fault_hit(FAULT_KILL_IN_SAVE, 5) == 1,
          "keyed point fires at its key");
    CHECK(fault_arg(FAULT_KILL_IN_SAVE, 1) == 2, "KILL_IN_SAVE's K");
    CHECK(fault_hit(FAULT_KILL_AT_EPOCH, 3) == 0 && fault_arg(FAULT_KILL_AT_EPOCH, 0) == -1,
          "a malformed value leaves the point unarmed");
    CHECK(fault_hit(FAULT_KILL_AT_COMMIT, 0) == 0, "unset point");
    fault_arm(FAULT_KILL_AT_COMMIT, 2);
    CHECK(fault_hit(FAULT_KILL_AT_COMMIT, 0) == 0 && fault_hit(FAULT_KILL_AT_COMMIT, 0) == 1,
          "fault_arm: fires at the n-th hit from now");
    CHECK(!strcmp(fault_env(FAULT_KILL_AT_COMMIT), "SCAFFOLD_FAULT_KILL_AT_COMMIT") &&
              !strcmp(fault_format(FAULT_FAIL_STEP), "R:K") && *fault_what(FAULT_KILL_IN_SAVE),
          "descriptions");
}

int main(void) {
    /* The table is read from the environment at the first call. */
    setenv("SCAFFOLD_FAULT_FAIL_STEP", "1:3", 1);
    setenv("SCAFFOLD_FAULT_KILL_IN_SAVE", "5:2", 1);
    setenv("SCAFFOLD_FAULT_KILL_AT_EPOCH", "x", 1);
    unsetenv("SCAFFOLD_FAULT_KILL_AT_COMMIT");
    test_fault();
    return test_report();
}
