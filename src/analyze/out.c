/* out: the analyzer's JSON writer and number/byte formatters (see out.h). */
#include "analyze/out.h"

#include <math.h>

void an_fmt_bytes(double b, char *buf, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) {
        b /= 1024;
        i++;
    }
    snprintf(buf, cap, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

void an_json_num(FILE *out, double v) {
    if (!isfinite(v))
        fputs("null", out);
    else if (v == floor(v) && fabs(v) < 1e15)
        fprintf(out, "%.0f", v);
    else
        fprintf(out, "%.10g", v);
}

void an_json_str(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                fprintf(out, "\\u%04x", *p);
            else
                fputc(*p, out);
        }
    }
    fputc('"', out);
}

void an_jw_init(an_jw *w, FILE *f) {
    w->f = f;
    w->depth = 0;
    w->used = 0;
}

/* Comma and key before a member at the current level. */
static void member(an_jw *w, const char *key) {
    uint32_t bit = 1u << (w->depth & 31);
    if (w->used & bit)
        fputc(',', w->f);
    w->used |= bit;
    if (key) {
        an_json_str(w->f, key);
        fputc(':', w->f);
    }
}

static void open_level(an_jw *w, const char *key, char c) {
    member(w, key);
    fputc(c, w->f);
    w->depth++;
    w->used &= ~(1u << (w->depth & 31));
}

void an_jw_obj(an_jw *w, const char *key) { open_level(w, key, '{'); }
void an_jw_arr(an_jw *w, const char *key) { open_level(w, key, '['); }

void an_jw_end(an_jw *w, char close) {
    fputc(close, w->f);
    if (w->depth > 0)
        w->depth--;
}

void an_jw_num(an_jw *w, const char *key, double v) {
    member(w, key);
    an_json_num(w->f, v);
}

void an_jw_u64(an_jw *w, const char *key, uint64_t v) {
    member(w, key);
    fprintf(w->f, "%llu", (unsigned long long)v);
}

void an_jw_i64(an_jw *w, const char *key, int64_t v) {
    member(w, key);
    fprintf(w->f, "%lld", (long long)v);
}

void an_jw_str(an_jw *w, const char *key, const char *s) {
    member(w, key);
    an_json_str(w->f, s);
}

void an_jw_bool(an_jw *w, const char *key, int v) {
    member(w, key);
    fputs(v ? "true" : "false", w->f);
}
