/* Kineto event scanner: the events array of a Chrome trace straight into columns.
 *
 * Contract (the Python side is gpuscope/readers/_scan.py, which runs it, and kineto.py, which
 * turns its columns into the model and also holds the msgspec reader this module speeds up):
 *
 *   scan(text: bytes, first: bool, start: int, stop: int) -> tuple
 *
 * reads whole events from text[start:stop] (stop -1: to the end), the inside of a
 * ``traceEvents`` array, where ``first`` says no event came before (else the next character
 * past white space must be ``,`` or ``]``). It stops at the array's closing bracket or at the
 * first event the text does not finish, and returns
 *
 *   (consumed, done, events, rows, columns, cats, names, extra_rows, extras, flows)
 *
 * consumed    offset just past the last whole event (or past ``]`` when done)
 * done        whether the array's ``]`` was reached
 * events      how many events of any phase were read
 * rows        how many complete ("X") events, one row each in the columns
 * columns     dict of column name -> bytes (native int32 / int64 / float64 / uint8 values)
 * cats        list of the raw (still JSON-escaped) category strings; column "cat" indexes it
 * names       the same for event names; column "name" indexes it
 * extra_rows  bytes of int64 rows whose args hold "Input Dims" or "Collective name"
 * extras      those rows' args objects, copied as one JSON array (decoded in Python)
 * flows       the flow events (phases s, f, t), copied as one JSON array
 *
 * Nothing returned points into ``text``: the caller can drop it at once.
 *
 * Integer arguments absent or null read -1, occupancy absent reads NaN, times are integer
 * nanoseconds computed exactly as the Python reader computes them. Values the typed Python
 * decoder rejects but its lenient fallback coerces (ids written as strings, floats) are coerced
 * the same way here. Anything else this scanner does not follow (an unknown phase, a time that
 * is not a number, invalid JSON) raises ValueError: the caller then reads the document the
 * slower way, so results never depend on which path ran. The scan runs without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { OK = 0, INCOMPLETE = 1, BAD = 2 };
enum { MAX_DEPTH = 512 };

/* ---- growable columns ------------------------------------------------------------------- */

enum {
    C_TS, C_DUR, C_PID, C_TID, C_CORRELATION, C_STREAM, C_DEVICE, C_EXTERNAL_ID,
    C_EXTERNAL_ID_2021, C_BYTES, C_PYTHON_ID, C_PYTHON_PARENT_ID, C_SIZE, C_GRID, C_BLOCK,
    N_INT64
};
static const char *INT64_NAMES[N_INT64] = {
    "ts_ns", "dur_ns", "pid", "tid", "correlation", "stream", "device", "external_id",
    "external_id_2021", "bytes", "python_id", "python_parent_id", "size", "grid", "block",
};

/* Integer arguments, in column order from C_CORRELATION (their keys: ARG_KEYS). */
enum { N_INT_ARGS = 9 };

/* A growable JSON array of copied spans: "[" span "," span ... (closed on output). */
typedef struct {
    char *data;
    Py_ssize_t length, capacity;
} Text;

static int text_append(Text *t, const char *span, Py_ssize_t length) {
    Py_ssize_t need = t->length + length + 2;
    if (need > t->capacity) {
        Py_ssize_t capacity = t->capacity ? t->capacity : 4096;
        while (capacity < need) capacity *= 2;
        char *p = realloc(t->data, (size_t)capacity);
        if (p == NULL) return -1;
        t->data = p;
        t->capacity = capacity;
    }
    t->data[t->length] = t->length == 0 ? '[' : ',';
    t->length++;
    memcpy(t->data + t->length, span, (size_t)length);
    t->length += length;
    return 0;
}

static PyObject *text_close(Text *t) {
    if (t->length == 0) return PyBytes_FromString("[]");
    t->data[t->length] = ']'; /* text_append keeps room for it */
    return PyBytes_FromStringAndSize(t->data, t->length + 1);
}

typedef struct {
    Py_ssize_t rows, capacity;
    int32_t *cat, *name;
    int64_t *ints[N_INT64];
    double *occupancy;
    uint8_t *flags; /* 1 where ts was written as a float */
    int64_t *extra_rows;
    Py_ssize_t n_extras, extras_capacity;
    Text extras; /* the args objects of extra_rows, as one JSON array */
    Text flows;  /* the flow events (phases s, f, t), as one JSON array */
} Columns;

static int columns_grow(Columns *c, Py_ssize_t hint) {
    Py_ssize_t capacity = c->capacity ? c->capacity * 2 : (hint > 4096 ? hint : 4096);
    void *p;
#define GROW(field, type)                                                \
    p = realloc(c->field, (size_t)capacity * sizeof(type));              \
    if (p == NULL) return -1;                                            \
    c->field = p;
    GROW(cat, int32_t)
    GROW(name, int32_t)
    GROW(occupancy, double)
    GROW(flags, uint8_t)
    for (int i = 0; i < N_INT64; i++) {
        GROW(ints[i], int64_t)
    }
#undef GROW
    c->capacity = capacity;
    return 0;
}

static int extras_push(Columns *c, int64_t row, const char *start, const char *end) {
    if (c->n_extras == c->extras_capacity) {
        Py_ssize_t capacity = c->extras_capacity ? c->extras_capacity * 2 : 256;
        void *p = realloc(c->extra_rows, (size_t)capacity * sizeof(int64_t));
        if (p == NULL) return -1;
        c->extra_rows = p;
        c->extras_capacity = capacity;
    }
    c->extra_rows[c->n_extras++] = row;
    return text_append(&c->extras, start, end - start);
}

static void columns_free(Columns *c) {
    free(c->cat);
    free(c->name);
    free(c->occupancy);
    free(c->flags);
    for (int i = 0; i < N_INT64; i++) free(c->ints[i]);
    free(c->extra_rows);
    free(c->extras.data);
    free(c->flows.data);
}

/* ---- interning raw strings -------------------------------------------------------------- */

typedef struct {
    const char *text;
    Py_ssize_t length;
    uint64_t hash;
} Entry;

typedef struct {
    Entry *slots;    /* open addressing; text == NULL is empty */
    int32_t *ids;    /* id of each slot */
    Entry *by_id;    /* entries in id order */
    Py_ssize_t count, capacity, by_id_capacity;
} Interner;

static uint64_t hash_bytes(const char *s, Py_ssize_t n) {
    uint64_t h = UINT64_C(0x9E3779B97F4A7C15) ^ (uint64_t)n; /* multiply-xorshift, 8 bytes a step */
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        memcpy(&word, s + i, 8);
        h = (h ^ word) * UINT64_C(0xBF58476D1CE4E5B9);
        h ^= h >> 31;
    }
    uint64_t last = 0;
    memcpy(&last, s + i, (size_t)(n - i));
    h = (h ^ last) * UINT64_C(0x94D049BB133111EB);
    return h ^ (h >> 29);
}

static int interner_resize(Interner *t, Py_ssize_t capacity) {
    Entry *slots = calloc((size_t)capacity, sizeof(Entry));
    int32_t *ids = calloc((size_t)capacity, sizeof(int32_t));
    if (slots == NULL || ids == NULL) {
        free(slots);
        free(ids);
        return -1;
    }
    for (Py_ssize_t i = 0; i < t->capacity; i++) {
        if (t->slots[i].text == NULL) continue;
        Py_ssize_t j = (Py_ssize_t)(t->slots[i].hash & (uint64_t)(capacity - 1));
        while (slots[j].text != NULL) j = (j + 1) & (capacity - 1);
        slots[j] = t->slots[i];
        ids[j] = t->ids[i];
    }
    free(t->slots);
    free(t->ids);
    t->slots = slots;
    t->ids = ids;
    t->capacity = capacity;
    return 0;
}

/* The id of a string (an empty string is a valid entry: its text pointer is never NULL). */
static int32_t intern(Interner *t, const char *text, Py_ssize_t length) {
    if ((t->count + 1) * 2 > t->capacity && interner_resize(t, t->capacity ? t->capacity * 2 : 1024))
        return -1;
    uint64_t h = hash_bytes(text, length);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(t->capacity - 1));
    while (t->slots[j].text != NULL) {
        Entry *e = &t->slots[j];
        if (e->hash == h && e->length == length && memcmp(e->text, text, (size_t)length) == 0)
            return t->ids[j];
        j = (j + 1) & (t->capacity - 1);
    }
    if (t->count == t->by_id_capacity) {
        Py_ssize_t capacity = t->by_id_capacity ? t->by_id_capacity * 2 : 1024;
        void *p = realloc(t->by_id, (size_t)capacity * sizeof(Entry));
        if (p == NULL) return -1;
        t->by_id = p;
        t->by_id_capacity = capacity;
    }
    Entry entry = {text, length, h};
    t->slots[j] = entry;
    t->ids[j] = (int32_t)t->count;
    t->by_id[t->count] = entry;
    return (int32_t)t->count++;
}

static void interner_free(Interner *t) {
    free(t->slots);
    free(t->ids);
    free(t->by_id);
}

/* ---- JSON lexing -------------------------------------------------------------------------- */

typedef struct {
    const char *p, *end, *base;
} Cursor;

static inline void skip_ws(Cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

/* A string at c->p (on its opening quote): its raw content span, and whether it has escapes. */
static int lex_string(Cursor *c, const char **text, Py_ssize_t *length, int *escaped) {
    const char *start = c->p + 1, *q = start;
    *escaped = 0;
    while (q < c->end) {
        unsigned char ch = (unsigned char)*q;
        if (ch == '"') {
            *text = start;
            *length = q - start;
            c->p = q + 1;
            return OK;
        }
        if (ch < 0x20) return BAD;
        if (ch != '\\') {
            q++;
            continue;
        }
        *escaped = 1;
        if (c->end - q < 2) return INCOMPLETE;
        switch (q[1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            q += 2;
            break;
        case 'u':
            if (c->end - q < 6) return INCOMPLETE;
            for (int k = 2; k < 6; k++) {
                char h = q[k];
                if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F')))
                    return BAD;
            }
            q += 6;
            break;
        default:
            return BAD;
        }
    }
    return INCOMPLETE;
}

/* ``is_float`` of an integer beyond int64: readers of typed values hand it to Python. */
enum { BIG_INTEGER = 2 };

/* A number: exact int64 when integral and in range, else a double (is_float set). */
static int lex_number(Cursor *c, int64_t *integer, double *real, int *is_float) {
    const char *p = c->p, *start = c->p;
    int negative = 0;
    *is_float = 0;
    if (p < c->end && *p == '-') {
        negative = 1;
        p++;
    }
    if (p >= c->end) return INCOMPLETE;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < c->end && *p >= '0' && *p <= '9') p++;
    } else {
        return BAD;
    }
    if (p < c->end && *p == '.') {
        *is_float = 1;
        p++;
        const char *digits = p;
        while (p < c->end && *p >= '0' && *p <= '9') p++;
        if (p == digits) return p >= c->end ? INCOMPLETE : BAD;
    }
    if (p < c->end && (*p == 'e' || *p == 'E')) {
        *is_float = 1;
        p++;
        if (p < c->end && (*p == '+' || *p == '-')) p++;
        const char *digits = p;
        while (p < c->end && *p >= '0' && *p <= '9') p++;
        if (p == digits) return p >= c->end ? INCOMPLETE : BAD;
    }
    if (p >= c->end) return INCOMPLETE; /* a number is never the last byte of a whole event */
    c->p = p;
    if (*is_float) {
        char buffer[64];
        Py_ssize_t n = p - start;
        if (n >= (Py_ssize_t)sizeof buffer) return BAD;
        memcpy(buffer, start, (size_t)n);
        buffer[n] = '\0';
        *real = strtod(buffer, NULL);
        return OK;
    }
    const char *q = start + negative;
    uint64_t value = 0;
    if (p - q <= 18) { /* cannot overflow: no check per digit */
        for (; q < p; q++) value = value * 10 + (uint64_t)(*q - '0');
    } else {
        for (; q < p; q++) {
            uint64_t digit = (uint64_t)(*q - '0');
            if (value > (UINT64_C(9223372036854775807) - digit) / 10) {
                *is_float = BIG_INTEGER; /* valid JSON all the same: a double for those who can */
                *real = strtod(start, NULL);
                return OK;
            }
            value = value * 10 + digit;
        }
    }
    *integer = negative ? -(int64_t)value : (int64_t)value;
    return OK;
}

static int expect_literal(Cursor *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n) {
        return memcmp(c->p, word, (size_t)(c->end - c->p)) == 0 ? INCOMPLETE : BAD;
    }
    if (memcmp(c->p, word, n) != 0) return BAD;
    c->p += n;
    return OK;
}

static int skip_value(Cursor *c, int depth);

/* The structure every object and array shares, for the readers below. */

/* At a container's opening bracket: past it and white space, at its first member (*closed 0),
 * or past its closing bracket when it is empty (*closed 1). */
static inline int open_container(Cursor *c, char close, int *closed) {
    c->p++;
    skip_ws(c);
    if (c->p >= c->end) return INCOMPLETE;
    *closed = *c->p == close;
    if (*closed) c->p++;
    return OK;
}

/* After a member: past its comma to the next one (*closed 0), or past the container's closing
 * bracket (*closed 1). */
static inline int next_member(Cursor *c, char close, int *closed) {
    skip_ws(c);
    if (c->p >= c->end) return INCOMPLETE;
    *closed = *c->p == close;
    if (*closed) {
        c->p++;
        return OK;
    }
    if (*c->p++ != ',') return BAD;
    skip_ws(c);
    return c->p >= c->end ? INCOMPLETE : OK;
}

/* At an object member: its key's raw span, then past the colon and white space to its value. */
static inline int member_key(Cursor *c, const char **key, Py_ssize_t *length) {
    if (*c->p != '"') return BAD;
    int escaped, r = lex_string(c, key, length, &escaped);
    if (r != OK) return r;
    skip_ws(c);
    if (c->p >= c->end) return INCOMPLETE;
    if (*c->p++ != ':') return BAD;
    skip_ws(c);
    return c->p >= c->end ? INCOMPLETE : OK;
}

static int skip_container(Cursor *c, int depth, char close) {
    if (depth > MAX_DEPTH) return BAD;
    int closed, r = open_container(c, close, &closed);
    while (r == OK && !closed) {
        const char *key;
        Py_ssize_t length;
        if (close == '}' && (r = member_key(c, &key, &length)) != OK) return r;
        if ((r = skip_value(c, depth + 1)) != OK) return r;
        r = next_member(c, close, &closed);
    }
    return r;
}

static int skip_value(Cursor *c, int depth) {
    if (c->p >= c->end) return INCOMPLETE;
    switch (*c->p) {
    case '{': return skip_container(c, depth, '}');
    case '[': return skip_container(c, depth, ']');
    case '"': {
        const char *text;
        Py_ssize_t length;
        int escaped;
        return lex_string(c, &text, &length, &escaped);
    }
    case 't': return expect_literal(c, "true");
    case 'f': return expect_literal(c, "false");
    case 'n': return expect_literal(c, "null");
    default: {
        int64_t integer;
        double real;
        int is_float;
        return lex_number(c, &integer, &real, &is_float);
    }
    }
}

/* ---- typed values ------------------------------------------------------------------------- */

/* Result of a typed read: OK, INCOMPLETE, BAD (invalid JSON) or UNSUPPORTED (valid JSON of a
 * type the typed decoder rejects: only an error for complete events). */
enum { UNSUPPORTED = 3 };

static inline int is_null(Cursor *c) {
    return c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0;
}

/* A strict integer (ids, launch dimensions): int, or null for -1. */
static int read_int_arg(Cursor *c, int64_t *out) {
    if (c->p >= c->end) return INCOMPLETE;
    if (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) {
        double real;
        int is_float, r = lex_number(c, out, &real, &is_float);
        if (r != OK) return r;
        return is_float ? UNSUPPORTED : OK;
    }
    if (is_null(c)) {
        c->p += 4;
        *out = -1;
        return OK;
    }
    int r = skip_value(c, 1);
    return r == OK ? UNSUPPORTED : r;
}

static inline int is_space(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}

/* An integer argument as the lenient Python reader coerces it (``int(value)``, else -1): ints,
 * floats truncated, digit strings such as "2560" (ROCm writes sizes so), -1 for "0x0", null,
 * lists and objects. */
static int read_arg_int(Cursor *c, int64_t *out) {
    if (c->p >= c->end) return INCOMPLETE;
    char first = *c->p;
    if (first == '-' || (first >= '0' && first <= '9')) {
        double real;
        int is_float, r = lex_number(c, out, &real, &is_float);
        if (r != OK || !is_float) return r;
        if (!(fabs(real) < 9.0e18)) return UNSUPPORTED;
        *out = (int64_t)real; /* C truncates toward zero, as int() does */
        return OK;
    }
    if (first == 't' || first == 'f') {
        int r = skip_value(c, 1);
        *out = first == 't';
        return r;
    }
    *out = -1;
    if (first != '"') return skip_value(c, 1);
    const char *text;
    Py_ssize_t length;
    int escaped, r = lex_string(c, &text, &length, &escaped);
    if (r != OK) return r;
    if (escaped) return UNSUPPORTED;
    const char *p = text, *stop = text + length;
    while (p < stop && is_space(*p)) p++;
    while (stop > p && is_space(stop[-1])) stop--;
    int negative = p < stop && *p == '-';
    if (p < stop && (*p == '-' || *p == '+')) p++;
    if (p == stop) return OK;
    uint64_t value = 0;
    for (const char *q = p; q < stop; q++) {
        unsigned char ch = (unsigned char)*q;
        if (ch == '_' || ch >= 0x80) return UNSUPPORTED; /* int() rules past ASCII digits */
        if (ch < '0' || ch > '9') return OK;
        if (value > UINT64_C(922337203685477580)) return UNSUPPORTED;
        value = value * 10 + (ch - '0');
    }
    *out = negative ? -(int64_t)value : (int64_t)value;
    return OK;
}

/* Microseconds (int or float) as integer nanoseconds, as the Python reader computes them. */
static int read_time(Cursor *c, int64_t *ns, int *is_float) {
    if (c->p >= c->end) return INCOMPLETE;
    if (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) {
        int64_t integer;
        double us;
        int r = lex_number(c, &integer, &us, is_float);
        if (r != OK) return r;
        if (!*is_float) {
            if (integer > INT64_MAX / 1000 || integer < INT64_MIN / 1000) return UNSUPPORTED;
            *ns = integer * 1000;
            return OK;
        }
        if (!isfinite(us) || fabs(us) > 9.0e15) return UNSUPPORTED;
        double whole = floor(us);
        *ns = (int64_t)whole * 1000 + (int64_t)nearbyint((us - whole) * 1000.0);
        return OK;
    }
    if (is_null(c)) { /* the lenient reader takes a null time as 0 */
        c->p += 4;
        *ns = 0;
        return OK;
    }
    int r = skip_value(c, 1);
    return r == OK ? UNSUPPORTED : r;
}

/* pid / tid: an int, or a string such as "24572" or "stream 7" (its last word's digits). */
static int read_id(Cursor *c, int64_t *out) {
    if (c->p >= c->end) return INCOMPLETE;
    if (*c->p != '"') return read_int_arg(c, out);
    const char *text;
    Py_ssize_t length;
    int escaped, r = lex_string(c, &text, &length, &escaped);
    if (r != OK) return r;
    if (escaped) return UNSUPPORTED;
    const char *word = text;
    for (Py_ssize_t i = length - 1; i >= 0; i--) {
        if (text[i] == ' ') {
            word = text + i + 1;
            break;
        }
    }
    const char *stop = text + length, *digits = word;
    int negative = 0;
    while (digits < stop && *digits == '-') {
        negative++;
        digits++;
    }
    *out = -1;
    if (digits == stop) return OK;
    uint64_t value = 0;
    for (const char *q = digits; q < stop; q++) {
        unsigned char ch = (unsigned char)*q;
        if (ch >= 0x80) return UNSUPPORTED; /* Unicode digits: left to Python */
        if (ch < '0' || ch > '9') return OK;
        if (value > UINT64_C(922337203685477580)) return UNSUPPORTED;
        value = value * 10 + (ch - '0');
    }
    if (negative > 1) return UNSUPPORTED;
    *out = negative ? -(int64_t)value : (int64_t)value;
    return OK;
}

/* grid / block: the product of a list of ints; -1 when null, empty, or not a list of ints. */
static int read_dims(Cursor *c, int64_t *out) {
    if (c->p >= c->end) return INCOMPLETE;
    *out = -1;
    if (*c->p != '[') return skip_value(c, 1);
    c->p++;
    int64_t product = 1;
    int ints = 1, unsupported = 0;
    skip_ws(c);
    if (c->p >= c->end) return INCOMPLETE;
    if (*c->p == ']') {
        c->p++;
        return OK;
    }
    for (;;) {
        if (c->p >= c->end) return INCOMPLETE;
        char first = *c->p;
        int number = first == '-' || (first >= '0' && first <= '9');
        int64_t value = 0;
        int r = number ? read_int_arg(c, &value) : skip_value(c, 1);
        if (r == INCOMPLETE || r == BAD) return r;
        if (first == 't' || first == 'f') unsupported = 1; /* Python counts a bool as an int */
        else if (!number || r == UNSUPPORTED) ints = 0; /* a float, string or null */
        else if (value < 0 || (value != 0 && product > INT64_MAX / value)) unsupported = 1;
        else product *= value;
        skip_ws(c);
        if (c->p >= c->end) return INCOMPLETE;
        if (*c->p == ']') {
            c->p++;
            break;
        }
        if (*c->p++ != ',') return BAD;
        skip_ws(c);
    }
    if (unsupported) return UNSUPPORTED;
    *out = ints ? product : -1;
    return OK;
}

/* A float argument: a number, NaN for anything else. */
static int read_real(Cursor *c, double *out) {
    if (c->p >= c->end) return INCOMPLETE;
    char first = *c->p;
    if (first == '-' || (first >= '0' && first <= '9')) {
        int64_t integer;
        int is_float, r = lex_number(c, &integer, out, &is_float);
        if (r == OK && !is_float) *out = (double)integer;
        return r;
    }
    *out = NAN;
    int r = skip_value(c, 1);
    return r == OK && (first == 't' || first == 'f') ? UNSUPPORTED : r;
}

typedef struct {
    const char *text;
    Py_ssize_t length;
    int code;
} Key;

#define KEY(text, code) {text, sizeof(text) - 1, code}

/* The code of a key in ``keys`` (ended by a NULL text), or -1: lengths first, then bytes. */
static inline int key_code(const Key *keys, const char *text, Py_ssize_t length) {
    for (const Key *k = keys; k->text != NULL; k++)
        if (k->length == length && k->text[0] == text[0] &&
            memcmp(k->text, text, (size_t)length) == 0)
            return k->code;
    return -1;
}

enum { A_GRID = N_INT_ARGS, A_BLOCK, A_OCCUPANCY, A_EXTRA };
static const Key ARG_KEYS[] = {
    KEY("correlation", 0), KEY("stream", 1), KEY("device", 2), KEY("External id", 3),
    KEY("external id", 4), KEY("bytes", 5), KEY("Python id", 6), KEY("Python parent id", 7),
    KEY("size", 8), KEY("grid", A_GRID), KEY("block", A_BLOCK),
    KEY("est. achieved occupancy %", A_OCCUPANCY), KEY("Input Dims", A_EXTRA),
    KEY("Collective name", A_EXTRA), {NULL, 0, 0},
};

enum { E_PH, E_CAT, E_NAME, E_PID, E_TID, E_TS, E_DUR, E_ARGS };
static const Key EVENT_KEYS[] = {
    KEY("ph", E_PH), KEY("cat", E_CAT), KEY("name", E_NAME), KEY("pid", E_PID),
    KEY("tid", E_TID), KEY("ts", E_TS), KEY("dur", E_DUR), KEY("args", E_ARGS), {NULL, 0, 0},
};

typedef struct {
    int64_t ints[N_INT_ARGS];
    int64_t grid, block;
    double occupancy;
    int extra;
    const char *start, *end;
} Args;

static void args_defaults(Args *a) {
    for (int i = 0; i < N_INT_ARGS; i++) a->ints[i] = -1;
    a->grid = a->block = -1;
    a->occupancy = NAN;
    a->extra = 0;
    a->start = a->end = NULL;
}

static int read_args(Cursor *c, Args *a, int *unsupported) {
    args_defaults(a);
    a->start = c->p;
    if (is_null(c)) {
        c->p += 4;
        a->end = c->p;
        return OK;
    }
    if (*c->p != '{') {
        *unsupported = 1;
        return skip_value(c, 1);
    }
    int closed, r = open_container(c, '}', &closed);
    while (r == OK && !closed) {
        const char *key;
        Py_ssize_t length;
        if ((r = member_key(c, &key, &length)) != OK) return r;
        int code = key_code(ARG_KEYS, key, length);
        if (code >= 0 && code < N_INT_ARGS) {
            r = read_arg_int(c, &a->ints[code]);
        } else if (code == A_GRID) {
            r = read_dims(c, &a->grid);
        } else if (code == A_BLOCK) {
            r = read_dims(c, &a->block);
        } else if (code == A_OCCUPANCY) {
            r = read_real(c, &a->occupancy);
        } else {
            if (code == A_EXTRA && !is_null(c)) a->extra = 1;
            r = skip_value(c, 1);
        }
        if (r == UNSUPPORTED) *unsupported = 1;
        else if (r != OK) return r;
        r = next_member(c, '}', &closed);
    }
    a->end = c->p;
    return r;
}

/* ---- events ------------------------------------------------------------------------------- */

typedef struct {
    Columns columns;
    Interner cats, names;
    Py_ssize_t events;
    const char *error; /* why the scan stopped with BAD / UNSUPPORTED */
    Py_ssize_t error_at;
} Scan;

static const char PHASES[] = "XBEiIsftPNODCbneMRcVpSTF";

static int read_event(Cursor *c, Scan *s) {
    if (*c->p != '{') {
        s->error = "an event that is not a JSON object";
        return UNSUPPORTED;
    }
    const char *event_start = c->p;
    char phase = 0;
    int unsupported = 0, is_float = 0, float_ts = 0;
    const char *cat = "", *name = "";
    Py_ssize_t cat_length = 0, name_length = 0;
    int64_t ts = 0, dur = 0, pid = -1, tid = -1;
    Args args;
    args_defaults(&args);
    int closed, r = open_container(c, '}', &closed);
    while (r == OK && !closed) {
        const char *key;
        Py_ssize_t length;
        int escaped;
        if ((r = member_key(c, &key, &length)) != OK) return r;
        int is_string = *c->p == '"';
        int code = key_code(EVENT_KEYS, key, length);
        if (code == E_PH) {
            const char *text;
            if (!is_string) {
                r = skip_value(c, 1);
                if (r == OK) r = UNSUPPORTED;
            } else if ((r = lex_string(c, &text, &length, &escaped)) == OK) {
                if (length == 1 && !escaped && text[0] && strchr(PHASES, text[0]))
                    phase = text[0];
                else
                    r = UNSUPPORTED;
            }
            if (r == UNSUPPORTED) {
                s->error = "an event of unknown phase";
                phase = '?';
                r = OK;
            }
        } else if (code == E_CAT || code == E_NAME) {
            int is_cat = code == E_CAT;
            if (!is_string) {
                r = skip_value(c, 1);
                if (r == OK) r = UNSUPPORTED;
            } else {
                r = is_cat ? lex_string(c, &cat, &cat_length, &escaped)
                           : lex_string(c, &name, &name_length, &escaped);
            }
        } else if (code == E_PID) {
            r = read_id(c, &pid);
        } else if (code == E_TID) {
            r = read_id(c, &tid);
        } else if (code == E_TS) {
            r = read_time(c, &ts, &is_float);
            float_ts = is_float;
        } else if (code == E_DUR) {
            r = read_time(c, &dur, &is_float);
        } else if (code == E_ARGS) {
            int bad_args = 0;
            r = read_args(c, &args, &bad_args);
            if (r == OK && bad_args) r = UNSUPPORTED;
        } else {
            r = skip_value(c, 1);
        }
        if (r == UNSUPPORTED) unsupported = 1;
        else if (r != OK) return r;
        r = next_member(c, '}', &closed);
    }
    if (r != OK) return r;
    s->events++;
    if (phase == 0 || phase == '?') {
        if (phase == 0) s->error = "an event without a phase (\"ph\")";
        return UNSUPPORTED;
    }
    if (phase == 's' || phase == 'f' || phase == 't')
        return text_append(&s->columns.flows, event_start, c->p - event_start) < 0 ? BAD : OK;
    if (phase != 'X') return OK;
    if (unsupported) {
        s->error = "a complete event with a value of an unexpected type";
        return UNSUPPORTED;
    }
    Columns *col = &s->columns;
    /* Kineto events take 150-300 bytes of text: the first allocation rarely needs to grow (and
     * pages never written cost nothing). */
    if (col->rows == col->capacity && columns_grow(col, (c->end - c->p) / 96) < 0) return BAD;
    Py_ssize_t row = col->rows;
    int32_t cat_id = intern(&s->cats, cat, cat_length);
    int32_t name_id = intern(&s->names, name, name_length);
    if (cat_id < 0 || name_id < 0) return BAD;
    col->cat[row] = cat_id;
    col->name[row] = name_id;
    col->flags[row] = (uint8_t)float_ts;
    col->ints[C_TS][row] = ts;
    col->ints[C_DUR][row] = dur;
    col->ints[C_PID][row] = pid;
    col->ints[C_TID][row] = tid;
    for (int i = 0; i < N_INT_ARGS; i++) col->ints[C_CORRELATION + i][row] = args.ints[i];
    col->ints[C_GRID][row] = args.grid;
    col->ints[C_BLOCK][row] = args.block;
    col->occupancy[row] = args.occupancy;
    if (args.extra && extras_push(col, row, args.start, args.end) < 0) return BAD;
    col->rows++;
    return OK;
}

/* The scan proper, without the GIL. Returns OK, or BAD / UNSUPPORTED with s->error set. */
static int scan_events(Cursor *c, Scan *s, int first, const char **consumed, int *done) {
    *consumed = c->p;
    *done = 0;
    int expect_comma = !first;
    for (;;) {
        skip_ws(c);
        if (c->p >= c->end) return OK;
        if (*c->p == ']') {
            c->p++;
            *consumed = c->p;
            *done = 1;
            return OK;
        }
        if (expect_comma) {
            if (*c->p != ',') {
                s->error = "events not separated by a comma";
                return BAD;
            }
            c->p++;
            skip_ws(c);
            if (c->p >= c->end) return OK;
        }
        int r = read_event(c, s);
        if (r == INCOMPLETE) return OK;
        if (r != OK) {
            if (s->error == NULL) s->error = r == BAD ? "invalid JSON" : "an unexpected value";
            s->error_at = *consumed - c->base;
            return r;
        }
        *consumed = c->p;
        expect_comma = 1;
    }
}

/* ---- Python glue ---------------------------------------------------------------------------- */

static PyObject *strings_list(Interner *t) {
    PyObject *list = PyList_New(t->count);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < t->count; i++) {
        PyObject *item = PyBytes_FromStringAndSize(t->by_id[i].text, t->by_id[i].length);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

static int put_column(PyObject *dict, const char *key, const void *data, Py_ssize_t size) {
    PyObject *value = PyBytes_FromStringAndSize(data ? data : "", data ? size : 0);
    if (value == NULL) return -1;
    int r = PyDict_SetItemString(dict, key, value);
    Py_DECREF(value);
    return r;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, stop;
    int first;
    if (!PyArg_ParseTuple(args, "y*pnn", &view, &first, &start, &stop)) return NULL;
    if (stop < 0 || stop > view.len) stop = view.len;
    if (start < 0 || start > stop) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_IndexError, "start outside the text");
        return NULL;
    }
    Scan s;
    memset(&s, 0, sizeof s);
    Cursor c = {(const char *)view.buf + start, (const char *)view.buf + stop, view.buf};
    const char *consumed;
    int done, r;
    Py_BEGIN_ALLOW_THREADS
    r = scan_events(&c, &s, first, &consumed, &done);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL, *columns = NULL, *cats = NULL, *names = NULL, *extra_rows = NULL;
    PyObject *extras = NULL, *flows = NULL;
    if (r != OK) {
        PyErr_Format(PyExc_ValueError, "%s (event at byte %zd)", s.error ? s.error : "invalid",
                     s.error_at);
        goto finally;
    }
    Columns *col = &s.columns;
    Py_ssize_t n = col->rows;
    columns = PyDict_New();
    if (columns == NULL) goto finally;
    if (put_column(columns, "cat", col->cat, n * 4) < 0 ||
        put_column(columns, "name", col->name, n * 4) < 0 ||
        put_column(columns, "occupancy", col->occupancy, n * 8) < 0 ||
        put_column(columns, "float_time", col->flags, n) < 0)
        goto finally;
    for (int i = 0; i < N_INT64; i++)
        if (put_column(columns, INT64_NAMES[i], col->ints[i], n * 8) < 0) goto finally;
    if ((cats = strings_list(&s.cats)) == NULL || (names = strings_list(&s.names)) == NULL)
        goto finally;
    extra_rows = PyBytes_FromStringAndSize(
        col->extra_rows ? (const char *)col->extra_rows : "", col->n_extras * 8);
    if (extra_rows == NULL || (extras = text_close(&col->extras)) == NULL ||
        (flows = text_close(&col->flows)) == NULL)
        goto finally;
    result = Py_BuildValue("(nOnnOOOOOO)", (Py_ssize_t)(consumed - (const char *)view.buf),
                           done ? Py_True : Py_False, s.events, n, columns, cats, names,
                           extra_rows, extras, flows);
finally:
    Py_XDECREF(columns);
    Py_XDECREF(cats);
    Py_XDECREF(names);
    Py_XDECREF(extra_rows);
    Py_XDECREF(extras);
    Py_XDECREF(flows);
    columns_free(&s.columns);
    interner_free(&s.cats);
    interner_free(&s.names);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS, "Scan whole Kineto events into columns (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_kscan", "Kineto events straight into columns.", -1, METHODS,
};

PyMODINIT_FUNC PyInit__kscan(void) { return PyModule_Create(&MODULE); }
