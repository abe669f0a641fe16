/* Unit tests for src/core/yamlx's reading of mappings into structs: every field type, good and
 * bad values, required and unknown keys, and the messages (file, line, context, key, fix). */
#include "core/err.h"
#include "core/fsutil.h"
#include "core/yamlx.h"
#include "test.h"

#include <math.h>
#include <string.h>

typedef struct {
    char name[8], mode[8];
    int count, on;
    double ratio;
    struct {
        int n, v[3];
    } dims;
    yaml_node_t *list, *map;
} rec;

static const char *const modes[] = {"fast", "slow", NULL};
static const yamlx_field fields[] = {
    {"name", YAMLX_STR, YAMLX_AT(rec, name), .flags = YAMLX_REQUIRED},
    {"mode", YAMLX_ENUM, YAMLX_AT(rec, mode), .names = modes},
    {"count", YAMLX_INT, YAMLX_AT(rec, count), .min = 1, .max = 12},
    {"on", YAMLX_BOOL, YAMLX_AT(rec, on)},
    {"ratio", YAMLX_DOUBLE, YAMLX_AT(rec, ratio)},
    {"dims", YAMLX_INTS, YAMLX_AT(rec, dims), .min = 2, .max = 4},
    {"list", YAMLX_LIST, YAMLX_AT(rec, list)},
    {"map", YAMLX_MAP, YAMLX_AT(rec, map)},
    {"doc", YAMLX_SKIP, .off = 0},
};
#define NF (sizeof fields / sizeof fields[0])

/* Loads `txt` as "f.yml" and reads its root into *r (strict or not): 0 or the error code. */
static int read(const char *txt, rec *r, int strict) {
    memset(r, 0, sizeof *r);
    yamlx_doc d;
    int rc = yamlx_load_text(&d, txt, strlen(txt), "f.yml", ERR_CONFIG);
    if (rc)
        return rc;
    rc = yamlx_map_read(&d, yamlx_root(&d), fields, NF, r, "entry 1", strict);
    yamlx_free(&d);
    return rc;
}

/* Reading `txt` must fail with ERR_CONFIG and exactly message `msg`. */
static void bad(const char *txt, const char *msg) {
    rec r;
    int rc = read(txt, &r, 1);
    CHECK(rc == ERR_CONFIG && !strcmp(err_msg(), msg), "%s\n  got %d '%s'\n  want '%s'", txt, rc,
          err_msg(), msg);
}

static void test_good(void) {
    rec r;
    int rc = read("name: abc\nmode: slow\ncount: 12\non: True\nratio: -2.5e-3\ndims: [2, 4]\n"
                  "list: [a, b]\nmap: {x: 1}\ndoc: [anything, {at: all}]\n", &r, 1);
    CHECK(rc == 0, "every type: %s", err_msg());
    CHECK(!strcmp(r.name, "abc") && !strcmp(r.mode, "slow") && r.count == 12 && r.on == 1 &&
              r.ratio == -2.5e-3 && r.dims.n == 2 && r.dims.v[0] == 2 && r.dims.v[1] == 4,
          "values: %s %s %d %d %g %d", r.name, r.mode, r.count, r.on, r.ratio, r.dims.n);
    CHECK(r.list && r.list->type == YAML_SEQUENCE_NODE && r.map &&
              r.map->type == YAML_MAPPING_NODE,
          "list and mapping nodes handed over");
    /* Keys left out keep their field; a null is an empty text; 0 is false. */
    rc = read("name:\non: 0\n", &r, 1);
    CHECK(rc == 0 && !r.name[0] && r.count == 0 && r.on == 0 && !r.list, "defaults kept: %s",
          err_msg());
    /* Lenient tables ignore other keys. */
    CHECK(read("name: a\ncolour: red\n", &r, 0) == 0, "unknown key ignored: %s", err_msg());
}

static void test_bad(void) {
    bad("name: a\ncount: 13\n",
        "f.yml:2: entry 1: key 'count': expected an integer in [1, 12], got '13'");
    bad("name: a\ncount: 2.5\n",
        "f.yml:2: entry 1: key 'count': expected an integer in [1, 12], got '2.5'");
    bad("name: a\ncount: 99999999999\n",
        "f.yml:2: entry 1: key 'count': expected an integer in [1, 12], got '99999999999'");
    bad("name: a\ncount: [1]\n",
        "f.yml:2: entry 1: key 'count': expected an integer in [1, 12], found a list");
    bad("name: a\ncount:\n", "f.yml:2: entry 1: key 'count' has no value");
    bad("name: a\nratio: lots\n", "f.yml:2: entry 1: key 'ratio': expected a number, got 'lots'");
    bad("name: a\nratio: .inf\n", "f.yml:2: entry 1: key 'ratio': expected a number, got '.inf'");
    bad("name: a\non: yes\n", "f.yml:2: entry 1: key 'on': expected true or false, got 'yes'");
    bad("name: a\nmode: medium\n",
        "f.yml:2: entry 1: key 'mode': expected one of fast, slow, got 'medium'");
    bad("name: abcdefgh\n",
        "f.yml:1: entry 1: key 'name': expected a text of at most 7 characters, got 'abcdefgh'");
    bad("name: {a: 1}\n",
        "f.yml:1: entry 1: key 'name': expected a text of at most 7 characters, found a mapping");
    bad("name: a\ndims: [2, 3, 4, 2]\n", "f.yml:2: entry 1: key 'dims': expected a list of up to "
        "3 integers in [2, 4], got '[2, 3, 4, 2]'");
    bad("name: a\ndims: [2, 5]\n", "f.yml:2: entry 1: key 'dims': expected a list of up to 3 "
        "integers in [2, 4], got '[2, 5]'");
    bad("name: a\ndims: [2, [3]]\n", "f.yml:2: entry 1: key 'dims': expected a list of up to 3 "
        "integers in [2, 4], got '[2, ...]'");
    bad("name: a\ndims: []\n", "f.yml:2: entry 1: key 'dims': expected a list of up to 3 "
        "integers in [2, 4], got '[]'");
    bad("name: a\nlist: x\n", "f.yml:2: entry 1: key 'list': expected a list, found a scalar");
    bad("name: a\nmap: [x]\n", "f.yml:2: entry 1: key 'map': expected a mapping, found a list");
    bad("count: 3\n", "f.yml:1: entry 1: missing required key 'name'");
    bad("", "f.yml:1: entry 1: missing required key 'name'");
    bad("name: a\n\ncolour: red\n", "f.yml:3: entry 1: unknown key 'colour' (valid keys: name, "
        "mode, count, on, ratio, dims, list, map, doc)");
    bad("[a, b]\n", "f.yml:1: entry 1: expected a mapping, found a list");
    bad("name: a\n[x]: 1\n", "f.yml:2: entry 1: keys must be plain names, found a list");
    /* The document checks come first: a key given twice, a syntax error. */
    bad("name: a\ncount: 1\nname: b\n",
        "f.yml: key 'name' appears twice in one mapping (lines 1 and 3); keep one");
    bad("name: [a\n", "f.yml:2:1: YAML syntax error: did not find expected ',' or ']'");
}

/* Values from a text (a command-line flag), and PyYAML's types (YAMLX_TYPED). */
static void test_text_and_typed(void) {
    rec r;
    memset(&r, 0, sizeof r);
    CHECK(yamlx_set(&fields[5], &r, "[2, 3,4]", "--dims", ERR_USAGE) == 0 && r.dims.n == 3 &&
              r.dims.v[2] == 4,
          "list from a text: %s", err_msg());
    CHECK(yamlx_set(&fields[5], &r, "", "--dims", ERR_USAGE) == ERR_USAGE &&
              !strcmp(err_msg(), "--dims: expected a list of up to 3 integers in [2, 4], got ''"),
          "empty list text: %s", err_msg());
    CHECK(yamlx_set(&fields[2], &r, "true", "--count", ERR_USAGE) == ERR_USAGE,
          "true is no integer without YAMLX_TYPED");
    const yamlx_field typed = {"n", YAMLX_INT, YAMLX_AT(rec, count), .flags = YAMLX_TYPED};
    CHECK(yamlx_set(&typed, &r, "TRUE", "--n", ERR_USAGE) == 0 && r.count == 1,
          "true is 1 with YAMLX_TYPED");
    yamlx_doc d;
    const char *txt = "a: \"7\"\nb: 7\n";
    CHECK(yamlx_load_text(&d, txt, strlen(txt), "t.yml", ERR_CONFIG) == 0, "load");
    yaml_node_t *a = yamlx_get(&d, yamlx_root(&d), "a"), *b = yamlx_get(&d, yamlx_root(&d), "b");
    CHECK(a && b && !strcmp(yamlx_text(a), "7") && !yamlx_get(&d, a, "x") &&
              !yamlx_get(&d, yamlx_root(&d), "c"),
          "yamlx_get, yamlx_text");
    CHECK(yamlx_set_node(&d, &typed, &r, a, "t.yml: key 'a'") == ERR_CONFIG &&
              strstr(err_msg(), "t.yml: key 'a': expected an integer, got the quoted text \"7\""),
          "a quoted number is a text: %s", err_msg());
    CHECK(yamlx_set_node(&d, &fields[2], &r, a, "t.yml: key 'a'") == 0 && r.count == 7,
          "... unless the field says otherwise: %s", err_msg());
    CHECK(yamlx_set_node(&d, &typed, &r, b, "t.yml: key 'b'") == 0 && r.count == 7, "plain 7");
    yamlx_free(&d);
    /* A text longer than the field: refused, or cut with YAMLX_CUT. */
    const yamlx_field cut = {"s", YAMLX_STR, YAMLX_AT(rec, name), .flags = YAMLX_CUT};
    CHECK(yamlx_set(&cut, &r, "abcdefghij", "s", ERR_CONFIG) == 0 && !strcmp(r.name, "abcdefg"),
          "cut to 7: %s", r.name);
    char big[300];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK(yamlx_set(&fields[0], &r, big, "s", ERR_CONFIG) == ERR_CONFIG &&
              strstr(err_msg(), "xxx...'") && strlen(err_msg()) < 150,
          "a long value is shown cut: %s", err_msg());
}

static void test_file(void) {
    char dir[] = "/tmp/scaffold-yamlx-XXXXXX";
    if (!mkdtemp(dir))
        return;
    char path[256];
    snprintf(path, sizeof path, "%s/r.yml", dir);
    yamlx_doc d;
    CHECK(yamlx_load_file(&d, path, "rules file", ERR_CONFIG) == ERR_CONFIG &&
              strstr(err_msg(), "cannot open rules file ") && strstr(err_msg(), "r.yml: No such"),
          "missing file: %s", err_msg());
    CHECK(yamlx_load_file(&d, dir, "rules file", ERR_FORMAT) == ERR_FORMAT &&
              strstr(err_msg(), "Is a directory"),
          "a directory: %s", err_msg());
    fs_write_file(path, "name: x\nratio: 0.5\n", 19, 0);
    rec r;
    memset(&r, 0, sizeof r);
    int rc = yamlx_load_file(&d, path, "rules file", ERR_CONFIG);
    CHECK(rc == 0, "load file: %s", err_msg());
    if (rc == 0) {
        CHECK(yamlx_map_read(&d, yamlx_root(&d), fields, NF, &r, NULL, 1) == 0 &&
                  r.ratio == 0.5 && !strcmp(r.name, "x"),
              "read file: %s", err_msg());
        yamlx_free(&d);
    }
    fs_rm_rf(dir);
}

int main(void) {
    test_good();
    test_bad();
    test_text_and_typed();
    test_file();
    return test_report();
}
