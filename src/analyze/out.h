/* out: the one output vocabulary of the analyzer's reports (analyze, compare): a small streaming
 * JSON writer that places the commas itself, and the number and byte formatters every renderer
 * (text, JSON, HTML) uses, so the same value prints the same way everywhere. */
#ifndef SCAFFOLD_ANALYZE_OUT_H
#define SCAFFOLD_ANALYZE_OUT_H

#include <stdint.h>
#include <stdio.h>

/* Bytes as "12.3 MiB" (binary units; "512 B" below 1 KiB). */
void an_fmt_bytes(double b, char *buf, size_t cap);

/* A JSON number: integers without a fraction, others with 10 significant digits, non-finite
 * values as null. */
void an_json_num(FILE *out, double v);
/* A JSON string with escaping (control characters as \u00XX). NULL prints "". */
void an_json_str(FILE *out, const char *s);

/* Streaming writer: call the key variants inside objects and the NULL-key ones inside arrays.
 * Nesting up to 32 levels. */
typedef struct an_jw {
    FILE *f;
    int depth;
    uint32_t used; /* bit d: level d already holds a member (the next one needs a comma) */
} an_jw;

void an_jw_init(an_jw *w, FILE *f);
void an_jw_obj(an_jw *w, const char *key); /* opens { */
void an_jw_arr(an_jw *w, const char *key); /* opens [ */
void an_jw_end(an_jw *w, char close);      /* '}' or ']' */
void an_jw_num(an_jw *w, const char *key, double v);
void an_jw_u64(an_jw *w, const char *key, uint64_t v);
void an_jw_i64(an_jw *w, const char *key, int64_t v);
void an_jw_str(an_jw *w, const char *key, const char *s);
void an_jw_bool(an_jw *w, const char *key, int v);

#endif
