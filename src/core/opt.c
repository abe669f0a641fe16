/* opt: the option-table parser and its help printer (see opt.h). */
#include "core/opt.h"

#include "core/err.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Long names compare with '-' and '_' as the same character. */
static int opt_name_eq(const char *a, size_t alen, const char *b) {
    size_t i = 0;
    for (; i < alen && b[i]; i++) {
        char x = a[i] == '_' ? '-' : a[i], y = b[i] == '_' ? '-' : b[i];
        if (x != y)
            return 0;
    }
    return i == alen && b[i] == '\0';
}

static const opt_spec *opt_find_long(const opt_cmd *cmd, const char *name, size_t len) {
    for (const opt_spec *o = cmd->opts; o && o->type != OPT_END; o++)
        if (o->type != OPT_SECTION && opt_name_eq(name, len, o->name))
            return o;
    return NULL;
}

static const opt_spec *opt_find_short(const opt_cmd *cmd, char c) {
    for (const opt_spec *o = cmd->opts; o && o->type != OPT_END; o++)
        if (o->type != OPT_SECTION && o->shrt && o->shrt == c)
            return o;
    return NULL;
}

static int opt_takes_value(const opt_spec *o) {
    return o->type != OPT_FLAG && o->type != OPT_COUNT;
}

static int opt_nargs(const opt_spec *o) {
    return o->type == OPT_FN && o->nargs > 1 ? o->nargs : 1;
}

/* "--name" or "-c" as the user may have typed it, for messages. */
static void opt_label(const opt_spec *o, char *buf, size_t n) {
    snprintf(buf, n, "--%s", o->name);
}

int opt_parse_size(const char *s, int64_t *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v))
        return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1048576.0; end++; break;
    case 'g': case 'G': mul = 1073741824.0; end++; break;
    case 't': case 'T': mul = 1099511627776.0; end++; break;
    default: break;
    }
    if (*end)
        return -1;
    v *= mul;
    if (v != floor(v) || v < -9.2e18 || v > 9.2e18)
        return -1;
    *out = (int64_t)v;
    return 0;
}

/* "an integer in [1, 64]", "a positive integer", "a number > 0", ... for messages. */
static void opt_expected(const opt_spec *o, char *buf, size_t n) {
    const int is_int = o->type == OPT_INT || o->type == OPT_I64;
    const char *noun = o->type == OPT_SIZE ? "whole number (k, m, g, t suffixes allowed)"
                       : is_int            ? "integer"
                                           : "number";
    const char *art = is_int ? "an" : "a";
    double top = o->type == OPT_INT ? 2147483647.0 : o->type == OPT_DOUBLE ? HUGE_VAL : 9.2e18;
    int unbounded = o->max >= top;
    if (o->min == 0 && o->max == 0)
        snprintf(buf, n, "%s %s", art, noun);
    else if (unbounded && o->type != OPT_DOUBLE && (o->min == 0 || o->min == 1))
        snprintf(buf, n, "a %s %s", o->min == 1 ? "positive" : "non-negative", noun);
    else if (unbounded && o->type == OPT_DOUBLE && o->min > 0 && o->min < 1e-3)
        snprintf(buf, n, "%s %s > 0", art, noun);
    else if (unbounded)
        snprintf(buf, n, "%s %s >= %.15g", art, noun, o->min);
    else
        snprintf(buf, n, "%s %s in [%.15g, %.15g]", art, noun, o->min, o->max);
}

static int opt_bad_value(const opt_spec *o, const char *val) {
    char lab[96], what[160];
    opt_label(o, lab, sizeof lab);
    opt_expected(o, what, sizeof what);
    return err_set(ERR_USAGE, "%s: expected %s, got '%s'", lab, what, val);
}

static int opt_in_range(const opt_spec *o, double v) {
    return (o->min == 0 && o->max == 0) || (v >= o->min && v <= o->max);
}

/* Converts and stores one value (or calls the callback with `n` values). */
static int opt_store(const opt_spec *o, char **vals, int n) {
    const char *v = vals[0];
    switch (o->type) {
    case OPT_INT:
    case OPT_I64: {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        int lim = o->type == OPT_INT && (x < -2147483647LL - 1 || x > 2147483647LL);
        if (errno || end == v || *end || lim || !opt_in_range(o, (double)x))
            return opt_bad_value(o, v);
        if (o->type == OPT_INT)
            *(int *)o->dst = (int)x;
        else
            *(int64_t *)o->dst = (int64_t)x;
        return 0;
    }
    case OPT_SIZE: {
        int64_t x;
        if (opt_parse_size(v, &x) || !opt_in_range(o, (double)x))
            return opt_bad_value(o, v);
        *(int64_t *)o->dst = x;
        return 0;
    }
    case OPT_DOUBLE: {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x) || !opt_in_range(o, x))
            return opt_bad_value(o, v);
        *(double *)o->dst = x;
        return 0;
    }
    case OPT_STR:
        *(const char **)o->dst = v;
        return 0;
    case OPT_FN: {
        int rc = o->fn(o, vals, n, o->ctx);
        if (rc) {
            char lab[96];
            opt_label(o, lab, sizeof lab);
            err_prefix("%s", lab);
        }
        return rc;
    }
    default:
        return err_set(ERR_INTERNAL, "option table: bad type for --%s", o->name);
    }
}

/* Handles the option at argv[*i] (already known to start with '-'). */
static int opt_one(const opt_cmd *cmd, int argc, char **argv, int *i) {
    char *a = argv[*i];
    const opt_spec *o;
    char *inline_val = NULL;
    if (a[1] == '-') {
        char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        o = opt_find_long(cmd, name, len);
        if (!o)
            return err_set(ERR_USAGE, "unknown option '--%.*s' (see 'scaffold %s --help')",
                           (int)len, name, cmd->name);
        if (eq) {
            if (!opt_takes_value(o))
                return err_set(ERR_USAGE, "--%s takes no value, got '%s'", o->name, a);
            inline_val = eq + 1;
        }
    } else {
        o = opt_find_short(cmd, a[1]);
        if (!o)
            return err_set(ERR_USAGE, "unknown option '-%c' (see 'scaffold %s --help')", a[1],
                           cmd->name);
        if (!opt_takes_value(o)) {
            /* -vvv: every letter must be a flag. */
            for (const char *p = a + 1; *p; p++) {
                const opt_spec *f = opt_find_short(cmd, *p);
                if (!f || opt_takes_value(f))
                    return err_set(ERR_USAGE, "unknown option '%s' (see 'scaffold %s --help')", a,
                                   cmd->name);
                if (f->type == OPT_COUNT)
                    ++*(int *)f->dst;
                else
                    *(int *)f->dst = 1;
            }
            return 0;
        }
        if (a[2])
            inline_val = a + 2;
    }
    if (!opt_takes_value(o)) {
        if (o->type == OPT_COUNT)
            ++*(int *)o->dst;
        else
            *(int *)o->dst = 1;
        return 0;
    }
    if (inline_val) {
        char *vals[1] = {inline_val};
        return opt_store(o, vals, 1);
    }
    int k = opt_nargs(o);
    if (*i + k >= argc) {
        if (k == 1)
            return err_set(ERR_USAGE, "--%s needs a value (see 'scaffold %s --help')", o->name,
                           cmd->name);
        return err_set(ERR_USAGE, "--%s needs %d values (see 'scaffold %s --help')", o->name, k,
                       cmd->name);
    }
    int rc = opt_store(o, argv + *i + 1, k);
    *i += k;
    return rc;
}

int opt_parse(const opt_cmd *cmd, int argc, char **argv, int *first) {
    *first = argc;
    char **pos = NULL, **opts = NULL;
    int npos = 0, nopts = 0, rc = 0;
    if (cmd->positional == OPT_POS_ANY && argc > 1) {
        pos = malloc(sizeof *pos * (size_t)argc);
        opts = malloc(sizeof *opts * (size_t)argc);
        if (!pos || !opts) {
            free(pos), free(opts);
            return err_set(ERR_NOMEM, "out of memory parsing the command line");
        }
    }
    int i = 1;
    for (; i < argc && rc == 0; i++) {
        char *a = argv[i];
        int is_opt = a[0] == '-' && a[1] != '\0' && strcmp(a, "--") != 0;
        if (!is_opt) {
            if (cmd->positional == OPT_POS_REST)
                break;
            if (!strcmp(a, "--")) {
                /* Everything after "--" is positional. */
                for (i++; i < argc; i++) {
                    if (cmd->positional == OPT_POS_NONE) {
                        rc = err_set(ERR_USAGE, "unexpected argument '%s' (see 'scaffold %s --help')",
                                     argv[i], cmd->name);
                        break;
                    }
                    pos[npos++] = argv[i];
                }
                break;
            }
            if (cmd->positional == OPT_POS_NONE) {
                rc = err_set(ERR_USAGE, "unexpected argument '%s' (see 'scaffold %s --help')", a,
                             cmd->name);
                break;
            }
            pos[npos++] = a;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            rc = OPT_HELP;
            break;
        }
        int start = i;
        rc = opt_one(cmd, argc, argv, &i);
        if (opts)
            for (int k = start; k <= i && k < argc; k++)
                opts[nopts++] = argv[k];
    }
    if (cmd->positional == OPT_POS_REST) {
        *first = i < argc ? i : argc;
    } else if (cmd->positional == OPT_POS_ANY && rc == 0) {
        /* Options first, then the positional arguments in their order. */
        if (argc > 1) {
            memcpy(argv + 1, opts, sizeof *opts * (size_t)nopts);
            memcpy(argv + 1 + nopts, pos, sizeof *pos * (size_t)npos);
        }
        *first = 1 + nopts;
    }
    free(pos), free(opts);
    return rc;
}

static const char *opt_default_arg(const opt_spec *o) {
    switch (o->type) {
    case OPT_INT:
    case OPT_I64: return "N";
    case OPT_SIZE: return "SIZE";
    case OPT_DOUBLE: return "X";
    case OPT_STR: return "STR";
    case OPT_FN: return "VALUE";
    default: return "";
    }
}

static void opt_left(const opt_spec *o, char *buf, size_t n) {
    const char *arg = opt_takes_value(o) ? (o->arg ? o->arg : opt_default_arg(o)) : "";
    if (o->shrt)
        snprintf(buf, n, "-%c, --%s%s%s", o->shrt, o->name, *arg ? " " : "", arg);
    else
        snprintf(buf, n, "--%s%s%s", o->name, *arg ? " " : "", arg);
}

/* Prints `text` from column `indent` (the cursor is there), wrapped at OPT_HELP_COLUMNS. */
#define OPT_HELP_COLUMNS 100
static void opt_wrap(FILE *out, const char *text, int indent) {
    int col = indent;
    const char *p = text;
    while (*p) {
        const char *sp = strchr(p, ' ');
        int wl = sp ? (int)(sp - p) : (int)strlen(p);
        if (col > indent && col + 1 + wl > OPT_HELP_COLUMNS) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', out);
            col++;
        }
        fwrite(p, 1, (size_t)wl, out);
        col += wl;
        p += wl;
        while (*p == ' ')
            p++;
    }
    fputc('\n', out);
}

void opt_usage(const opt_cmd *cmd, FILE *out) {
    fprintf(out, "usage: scaffold %s %s\n", cmd->name, cmd->synopsis ? cmd->synopsis : "");
    if (cmd->summary)
        fprintf(out, "\n%s\n", cmd->summary);
    size_t w = 10;
    char left[256];
    for (const opt_spec *o = cmd->opts; o && o->type != OPT_END; o++) {
        if (!o->help || o->type == OPT_SECTION)
            continue;
        opt_left(o, left, sizeof left);
        size_t l = strlen(left);
        if (l > w && l <= 36)
            w = l;
    }
    fprintf(out, "\noptions:\n");
    int help_done = 0;
    for (const opt_spec *o = cmd->opts; o && o->type != OPT_END; o++) {
        if (!o->help)
            continue;
        if (o->type == OPT_SECTION) {
            /* -h comes last in the first section. */
            if (!help_done++)
                fprintf(out, "  %-*s  this help\n", (int)w, "-h, --help");
            fprintf(out, "\n%s\n", o->help);
            continue;
        }
        opt_left(o, left, sizeof left);
        if (strlen(left) > w)
            fprintf(out, "  %s\n  %-*s  ", left, (int)w, "");
        else
            fprintf(out, "  %-*s  ", (int)w, left);
        char text[1024];
        snprintf(text, sizeof text, "%s%s%s%s", o->help, o->def ? " [" : "", o->def ? o->def : "",
                 o->def ? "]" : "");
        opt_wrap(out, text, (int)w + 4);
    }
    if (!help_done)
        fprintf(out, "  %-*s  this help\n", (int)w, "-h, --help");
    if (cmd->epilog)
        fprintf(out, "\n%s\n", cmd->epilog);
}
