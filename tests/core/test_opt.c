/* Unit tests for src/core/opt, the option-table parser of every subcommand. */
#include "core/err.h"
#include "core/opt.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static int seen_n;
static char seen[3][32];
static int list_fn(const opt_spec *o, char **vals, int n, void *ctx) {
    (void)o, (void)ctx;
    seen_n = n;
    for (int i = 0; i < n && i < 3; i++)
        snprintf(seen[i], sizeof seen[i], "%s", vals[i]);
    if (!strcmp(vals[0], "bad"))
        return err_set(ERR_USAGE, "not a good value");
    return 0;
}

typedef struct {
    int flag, count, i;
    int64_t big, size;
    double x;
    const char *s;
} vals;

static int parse(vals *v, int pos, int argc, char **argv, int *first) {
    memset(v, 0, sizeof *v);
    v->i = -7;
    const opt_spec opts[] = {OPT_FLAG_('f', "flag", &v->flag, "a flag"),
                             OPT_COUNT_('v', "verbose", &v->count, "more"),
                             OPT_INT_('n', "num", &v->i, 1, 64, "N", "an int"),
                             OPT_I64_(0, "big-num", &v->big, -5, OPT_NO_MAX, "N", "an int64"),
                             OPT_SIZE_(0, "size", &v->size, 1, OPT_NO_MAX, "N", "a size"),
                             OPT_DOUBLE_(0, "ratio", &v->x, 0, 1, "X", "a ratio"),
                             OPT_STR_('o', "out", &v->s, "FILE", "a file"),
                             OPT_FN_(0, "three", list_fn, NULL, 3, "A B C", "three values"),
                             OPT_END_};
    const opt_cmd cmd = {"test", "[options]", "summary", opts, pos, "epilog"};
    return opt_parse(&cmd, argc, argv, first);
}

#define ARGV(...) (char *[]){"test", __VA_ARGS__, NULL}
#define ARGC(...) ((int)(sizeof((char *[]){"test", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(pos, ...) parse(&v, pos, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), &first)

static void test_opt(void) {
    vals v;
    int first, rc;
    rc = PARSE(OPT_POS_NONE, "--flag", "-vv", "--verbose", "--num", "12", "--big-num=-5", "--size",
               "1.5k", "--ratio", "0.25", "-o", "x.npy", "--three", "a", "b", "c");
    CHECK(rc == 0, "all types: %s", err_msg());
    CHECK(v.flag == 1 && v.count == 3 && v.i == 12 && v.big == -5 && v.size == 1536 &&
              v.x == 0.25 && v.s && !strcmp(v.s, "x.npy"),
          "values %d %d %d %lld %lld %g", v.flag, v.count, v.i, (long long)v.big,
          (long long)v.size, v.x);
    CHECK(seen_n == 3 && !strcmp(seen[2], "c"), "callback with 3 values (%d)", seen_n);
    CHECK(PARSE(OPT_POS_NONE, "--three=1,2,3") == 0 && seen_n == 1 && !strcmp(seen[0], "1,2,3"),
          "--name=value gives the callback one value");
    CHECK(PARSE(OPT_POS_NONE, "-n7", "-ofile") == 0 && v.i == 7 && !strcmp(v.s, "file"),
          "short options with attached values");
    CHECK(PARSE(OPT_POS_NONE, "--size", "2m") == 0 && v.size == 2 << 20, "size suffix");

    /* Range and type errors name the option, the accepted range and the value; negative numbers
     * reach the range check instead of being taken for options. */
    rc = PARSE(OPT_POS_NONE, "--num", "-5");
    CHECK(rc == ERR_USAGE && strstr(err_msg(), "--num: expected an integer in [1, 64], got '-5'"),
          "negative int: %s", err_msg());
    CHECK(v.i == -7, "a rejected value leaves the destination alone (%d)", v.i);
    rc = PARSE(OPT_POS_NONE, "--size", "-5");
    CHECK(rc == ERR_USAGE && strstr(err_msg(), "--size: expected a positive whole number") &&
              strstr(err_msg(), "got '-5'"),
          "negative size: %s", err_msg());
    rc = PARSE(OPT_POS_NONE, "--num", "12x");
    CHECK(rc == ERR_USAGE && strstr(err_msg(), "got '12x'"), "trailing junk: %s", err_msg());
    rc = PARSE(OPT_POS_NONE, "--num", "99999999999");
    CHECK(rc == ERR_USAGE, "int overflow rejected");
    rc = PARSE(OPT_POS_NONE, "--ratio", "nan");
    CHECK(rc == ERR_USAGE && strstr(err_msg(), "in [0, 1]"), "nan rejected: %s", err_msg());
    rc = PARSE(OPT_POS_NONE, "--size", "0.5");
    CHECK(rc == ERR_USAGE, "fractional size rejected");
    rc = PARSE(OPT_POS_NONE, "--three", "bad", "b", "c");
    CHECK(rc == ERR_USAGE && !strcmp(err_msg(), "--three: not a good value"),
          "callback error prefixed with the option: %s", err_msg());
    rc = PARSE(OPT_POS_NONE, "--three", "a", "b");
    CHECK(rc == ERR_USAGE && strstr(err_msg(), "--three needs 3 values"), "too few values: %s",
          err_msg());
    rc = PARSE(OPT_POS_NONE, "--out");
    CHECK(rc == ERR_USAGE && strstr(err_msg(), "--out needs a value"), "missing value: %s",
          err_msg());
    rc = PARSE(OPT_POS_NONE, "--bogus", "1");
    CHECK(rc == ERR_USAGE && strstr(err_msg(), "unknown option '--bogus'") &&
              strstr(err_msg(), "'scaffold test --help'"),
          "unknown option: %s", err_msg());
    rc = PARSE(OPT_POS_NONE, "-vx");
    CHECK(rc == ERR_USAGE && strstr(err_msg(), "unknown option '-vx'"), "bad bundle: %s",
          err_msg());
    rc = PARSE(OPT_POS_NONE, "--flag=1");
    CHECK(rc == ERR_USAGE && strstr(err_msg(), "--flag takes no value"), "flag with value: %s",
          err_msg());
    CHECK(PARSE(OPT_POS_NONE, "--num", "3", "--help", "--bogus") == OPT_HELP, "--help");
    CHECK(PARSE(OPT_POS_NONE, "-h") == OPT_HELP, "-h");

    /* '-' and '_' are the same in long names. */
    CHECK(PARSE(OPT_POS_NONE, "--num", "3", "--big_num", "1") == 0 && v.big == 1, "_ for -");

    /* Positional arguments in the three modes. */
    rc = PARSE(OPT_POS_NONE, "--flag", "file");
    CHECK(rc == ERR_USAGE && strstr(err_msg(), "unexpected argument 'file'"), "none: %s",
          err_msg());
    char **av = ARGV("a", "--num", "3", "b", "--flag", "--", "--c");
    rc = parse(&v, OPT_POS_ANY, 8, av, &first);
    CHECK(rc == 0 && first == 4 && !strcmp(av[4], "a") && !strcmp(av[5], "b") &&
              !strcmp(av[6], "--c") && !strcmp(av[1], "--num") && v.flag && v.i == 3,
          "any: positionals moved to the end in order (first %d)", first);
    char **av2 = ARGV("--flag", "cmd", "--num", "3");
    rc = parse(&v, OPT_POS_REST, 4, av2, &first);
    CHECK(rc == 0 && first == 2 && v.i == -7, "rest: stops at the first positional (%d)", first);
    char **av3 = ARGV("--flag", "--", "x");
    rc = parse(&v, OPT_POS_REST, 3, av3, &first);
    CHECK(rc == 0 && first == 2 && !strcmp(av3[first], "--"), "rest: leaves '--' in place");

    /* The help comes from the same table. */
    const opt_spec opts[] = {OPT_INT_('n', "num", &v.i, 1, 64, "N", "an int"),
                             OPT_SECTION_("more:"),
                             {.name = "key", .type = OPT_STR, .dst = &v.s, .help = "k", .def = "d"},
                             OPT_END_};
    const opt_cmd cmd = {"test", "[options]", "summary", opts, OPT_POS_NONE, "epilog"};
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    opt_usage(&cmd, f);
    fclose(f);
    CHECK(strstr(buf, "usage: scaffold test [options]") && strstr(buf, "-n, --num N") &&
              strstr(buf, "--key STR") && strstr(buf, "k [d]") && strstr(buf, "more:") &&
              strstr(buf, "-h, --help") && strstr(buf, "epilog"),
          "usage text:\n%s", buf);
    int64_t sz;
    CHECK(opt_parse_size("1t", &sz) == 0 && sz == (int64_t)1 << 40, "1t");
    CHECK(opt_parse_size("1e30", &sz) != 0 && opt_parse_size("", &sz) != 0 &&
              opt_parse_size("3q", &sz) != 0,
          "bad sizes rejected");
}

int main(void) {
    test_opt();
    return test_report();
}
