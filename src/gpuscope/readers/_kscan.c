/* Kineto event scanner: a Chrome trace file's events array straight into columns.
 *
 * Contract (the Python side is gpuscope/readers/_scan.py, which runs it, and kineto.py, which
 * turns its columns into the model and also holds the msgspec reader this module speeds up):
 *
 *   scan_file(fd: int, piece_bytes: int, hurry: bytearray, max_text: int, max_bytes: int)
 *       -> (header, scanned, tail, cut)
 *
 * reads a file from its descriptor, gzip (members one after another) or plain, without the GIL
 * and a slice at a time (the file is never all in memory): it inflates piece_bytes at a time
 * into a window, finds the first ``"traceEvents": [``, and scans every whole event into columns
 * until the array's ``]``. ``hurry`` is a flag byte another thread sets once it waits for the
 * result: inflating then moves to a thread of its own (POSIX). A gzip file whose text passes
 * ``max_text`` bytes, or a scan whose columns and window would pass ``max_bytes``, raises
 * LimitError(("text" | "memory", bytes so far)); a text after the array that would pass it once
 * decoded (TAIL_FACTOR times its length) is not scanned (ValueError); a read that fails raises
 * OSError.
 *
 * header      the text before the ``"traceEvents"`` key
 * tail        the text after the array's ``]`` (the document's other keys)
 * cut         whether the text ended first (a gzip stream or the array cut off mid-write)
 * scanned     (events, rows, columns, cats, names, extra_rows, extras, flows, counters, memory):
 *   events      how many events of any phase were read
 *   rows        how many complete ("X") events, one row each in the columns
 *   columns     dict of column name -> Block (a read-only buffer of native values, owning the
 *               scanner's memory: no copy): "cat" and "name" int32, "float_time" uint8,
 *               "occupancy" float32 (a figure outside 0-100 reads -1 or +inf, so it stays out
 *               of range as float32), "ts_ns" int64, every other integer column int32 while
 *               each of its values fits, int64 from the first that does not (the Block's
 *               size is then 8 bytes a row): most ids fit, and half the width is half the
 *               memory of a scan of tens of millions of events
 *   cats        list of the raw (still JSON-escaped) category strings; column "cat" indexes it
 *   names       the same for event names; column "name" indexes it
 *   extra_rows  bytes of int64 rows whose args hold "Input Dims", "Collective name" or
 *               "Call stack" (2021 traces' Python stacks)
 *   extras      (ids, texts): bytes of int32, per extra row the index in texts of its kept
 *               arguments (the members of args the model keeps, as one JSON object); each
 *               distinct text once (the same shapes recur at every step)
 *   flows       the flow events (phases s, f, t) as one JSON array, a Block: its text, or past
 *               16 MB "Z" and the text deflated (raw, zlib wbits -15); empty when none
 *   counters    the counter events (phase C), the same way
 *   memory      the allocator's instant events (phase "i" named "[memory]") on a device, a
 *               Block of int64 rows of MEMORY_COLUMNS values: ts (ns), tid, then the arguments Bytes,
 *               Addr, Device Id, Device Type, Total Allocated, Total Reserved, Ev Idx (-1
 *               when absent); events without all the first six, or of the CPU (Device Type
 *               0) or no device, are left out, as the Python reader leaves them out
 *
 * Nothing returned points into ``data``.
 *
 * Integer arguments absent or null read -1, occupancy absent reads NaN, times are integer
 * nanoseconds computed exactly as the Python reader computes them. Values the typed Python
 * decoder rejects but its lenient fallback coerces (ids written as strings, floats) are coerced
 * the same way here. Anything else this scanner does not follow (an unknown phase, a time that
 * is not a number, invalid JSON, no events array) raises ValueError: the caller then reads the
 * document the slower way, so results never depend on which path ran. Corrupt gzip data raises
 * GzipError with zlib's message.
 *
 *   use_zlib_ng(path: str | None) -> bool
 *
 * inflates with the zlib-ng in the loaded shared library at ``path`` (the zlib_ng package's
 * extension exports it), or with the system zlib (None or not found).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#ifndef _WIN32
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#endif
#ifdef __linux__
#include <sys/mman.h>
#endif

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

/* Grow a buffer of ``*capacity`` items of ``size`` bytes to hold ``need`` items, doubling. */
static int grow(void *buffer, Py_ssize_t *capacity, Py_ssize_t need, size_t size, Py_ssize_t least) {
    if (need <= *capacity) return 0;
    Py_ssize_t wanted = *capacity ? *capacity : least;
    while (wanted < need) wanted *= 2;
    void *p = realloc(*(void **)buffer, (size_t)wanted * size);
    if (p == NULL) return -1;
    *(void **)buffer = p;
    *capacity = wanted;
    return 0;
}

/* The columns of a [memory] event (see the contract above): its arguments, after ts and tid. */
enum { M_BYTES, M_ADDR, M_DEVICE, M_TYPE, M_ALLOCATED, M_RESERVED, M_ORDER, N_MEMORY_ARGS };
enum { MEMORY_COLUMNS = 2 + N_MEMORY_ARGS };

/* A growable buffer of bytes. */
typedef struct {
    char *data;
    Py_ssize_t length, capacity;
} Text;

/* A growable text, deflated (raw deflate, level 1) once it passes PLAIN_BYTES: the flow events
 * of a huge trace take a tenth of their text's memory this way, and are inflated only where
 * device work lacks correlation ids. Smaller texts stay plain: deflating costs time. */
enum { PLAIN_BYTES = 16 << 20 };
typedef struct {
    z_stream z;
    int live;   /* deflating: data holds deflated bytes */
    char *data; /* the text, or the deflated bytes so far */
    Py_ssize_t length, capacity, text_length;
} Packed;

static int packed_deflate(Packed *p, const char *span, Py_ssize_t length, int flush);

static int packed_put(Packed *p, const char *span, Py_ssize_t length, int flush) {
    if (!p->live && p->text_length + length <= PLAIN_BYTES && flush != Z_FINISH) {
        if (grow(&p->data, &p->capacity, p->length + length, 1, 4096) < 0) return -1;
        memcpy(p->data + p->length, span, (size_t)length);
        p->length += length;
        p->text_length += length;
        return 0;
    }
    if (!p->live) { /* from here on deflated: the plain text so far goes first */
        if (flush == Z_FINISH) { /* never past PLAIN_BYTES: it stays plain */
            if (grow(&p->data, &p->capacity, p->length + length, 1, 4096) < 0) return -1;
            memcpy(p->data + p->length, span, (size_t)length);
            p->length += length;
            p->text_length += length;
            return 0;
        }
        memset(&p->z, 0, sizeof p->z);
        if (deflateInit2(&p->z, 1, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
        p->live = 1;
        char *plain = p->data;
        Py_ssize_t plain_length = p->length;
        p->data = NULL;
        p->length = p->capacity = 0;
        p->text_length = 0;
        if (grow(&p->data, &p->capacity, 1, 1, 65536) < 0) {
            free(plain);
            return -1;
        }
        p->data[p->length++] = 'Z'; /* deflated bytes follow (see packed_block) */
        int r = packed_deflate(p, plain, plain_length, Z_NO_FLUSH);
        free(plain);
        if (r < 0) return -1;
    }
    return packed_deflate(p, span, length, flush);
}

static int packed_deflate(Packed *p, const char *span, Py_ssize_t length, int flush) {
    p->z.next_in = (Bytef *)span;
    p->z.avail_in = (uInt)length;
    for (;;) {
        if (grow(&p->data, &p->capacity, p->length + 65536, 1, 65536) < 0) return -1;
        p->z.next_out = (Bytef *)(p->data + p->length);
        p->z.avail_out = (uInt)(p->capacity - p->length);
        int r = deflate(&p->z, flush);
        p->length = p->capacity - p->z.avail_out;
        if (r == Z_STREAM_ERROR) return -1;
        if (flush == Z_FINISH ? r == Z_STREAM_END : p->z.avail_in == 0 && p->z.avail_out > 0) break;
    }
    p->text_length += length;
    return 0;
}

/* Append a span as the next item of the JSON array (spans are small: one event each). */
static int packed_append(Packed *p, const char *span, Py_ssize_t length) {
    if (packed_put(p, p->text_length == 0 ? "[" : ",", 1, Z_NO_FLUSH) < 0) return -1;
    return packed_put(p, span, length, Z_NO_FLUSH);
}

static void packed_free(Packed *p) {
    if (p->live) deflateEnd(&p->z);
    p->live = 0;
    free(p->data);
    p->data = NULL;
}

/* The columns, as counted in Columns.bytes. */
enum { B_CAT, B_NAME, B_OCCUPANCY, B_FLAGS, B_INTS, B_COLUMNS = B_INTS + N_INT64 };

typedef struct {
    Py_ssize_t rows, capacity;
    int32_t *cat, *name;
    void *ints[N_INT64]; /* int32_t while wide[i] is 0, int64_t once it is 1 */
    uint8_t wide[N_INT64];
    float *occupancy;
    uint8_t *flags; /* 1 where ts was written as a float */
    size_t bytes[B_COLUMNS]; /* the bytes of each column's mapping (see column_resize) */
    int64_t *extra_rows;
    int32_t *extra_ids; /* per extra row: its kept arguments' text, interned (Scan.extras) */
    Py_ssize_t n_extras, extras_capacity, ids_capacity;
    Packed flows;    /* the flow events (phases s, f, t), as one JSON array */
    Packed counters; /* the counter events (phase C), the same way */
    int64_t *memory; /* the allocator's "[memory]" events, MEMORY_COLUMNS values a row */
    Py_ssize_t memory_rows, memory_capacity;
} Columns;

/* The columns' memory is mapped from the system, not taken from malloc's heap (Linux; malloc
 * elsewhere). They are allocated for the rows the text may hold (see rows_hint), and most of
 * that is never written: in a heap, those unwritten pages would stay behind as holes once the
 * columns are freed, and the analyses' arrays would then fill them, page by page, on top of the
 * memory already in use (12 MB more at the peak of a 54 MB trace's diagnosis). A mapping is
 * returned whole when its Block is freed; it grows without a copy (``mremap``). */
static void *column_resize(void *p, size_t old_size, size_t new_size) {
#ifdef __linux__
    void *q = p == NULL ? mmap(NULL, new_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                        : mremap(p, old_size, new_size, MREMAP_MAYMOVE);
    return q == MAP_FAILED ? NULL : q;
#else
    (void)old_size;
    return realloc(p, new_size);
#endif
}

static void column_free(void *p, size_t size) {
    if (p == NULL) return;
#ifdef __linux__
    munmap(p, size);
#else
    (void)size;
    free(p);
#endif
}

/* Resize one column to ``size`` bytes; ``*bytes`` is its size, kept for the unmapping. */
static int column_resize_to(void *buffer, size_t *bytes, size_t size) {
    void *p = column_resize(*(void **)buffer, *bytes, size);
    if (p == NULL) return -1;
    *(void **)buffer = p;
    *bytes = size;
    return 0;
}

static int columns_grow(Columns *c, Py_ssize_t hint) {
    size_t capacity = (size_t)(c->capacity ? c->capacity * 2 : (hint > 4096 ? hint : 4096));
    if (column_resize_to(&c->cat, &c->bytes[B_CAT], capacity * 4) < 0 ||
        column_resize_to(&c->name, &c->bytes[B_NAME], capacity * 4) < 0 ||
        column_resize_to(&c->occupancy, &c->bytes[B_OCCUPANCY], capacity * 4) < 0 ||
        column_resize_to(&c->flags, &c->bytes[B_FLAGS], capacity) < 0)
        return -1;
    for (int i = 0; i < N_INT64; i++)
        if (column_resize_to(&c->ints[i], &c->bytes[B_INTS + i], capacity * (c->wide[i] ? 8 : 4)) < 0)
            return -1;
    c->capacity = (Py_ssize_t)capacity;
    return 0;
}

/* Column ``i`` from int32 to int64, in place, for a value that does not fit in 32 bits. Each
 * value moves from offset 4r to 8r, last row first: rows not yet moved are never overwritten. */
static int columns_widen(Columns *c, int i) {
    if (column_resize_to(&c->ints[i], &c->bytes[B_INTS + i], (size_t)c->capacity * 8) < 0)
        return -1;
    char *p = c->ints[i];
    for (Py_ssize_t r = c->rows; r-- > 0;) {
        int32_t narrow;
        memcpy(&narrow, p + 4 * r, 4);
        int64_t wide = narrow;
        memcpy(p + 8 * r, &wide, 8);
    }
    c->wide[i] = 1;
    return 0;
}

/* Store ``value`` in column ``i`` at ``row``, widening the column when it does not fit. */
static inline int columns_put(Columns *c, int i, Py_ssize_t row, int64_t value) {
    if (!c->wide[i]) {
        if (value >= INT32_MIN && value <= INT32_MAX) {
            ((int32_t *)c->ints[i])[row] = (int32_t)value;
            return 0;
        }
        if (columns_widen(c, i) < 0) return -1;
    }
    ((int64_t *)c->ints[i])[row] = value;
    return 0;
}

/* The bytes a row takes in the columns, at their present widths. */
static Py_ssize_t columns_row_bytes(const Columns *c) {
    Py_ssize_t bytes = 4 + 4 + 4 + 1;
    for (int i = 0; i < N_INT64; i++) bytes += c->wide[i] ? 8 : 4;
    return bytes;
}

static int extras_push(Columns *c, int64_t row, int32_t id) {
    if (grow(&c->extra_rows, &c->extras_capacity, c->n_extras + 1, sizeof(int64_t), 256) < 0 ||
        grow(&c->extra_ids, &c->ids_capacity, c->n_extras + 1, sizeof(int32_t), 256) < 0)
        return -1;
    c->extra_ids[c->n_extras] = id;
    c->extra_rows[c->n_extras++] = row;
    return 0;
}

static void columns_free(Columns *c) {
    column_free(c->cat, c->bytes[B_CAT]);
    column_free(c->name, c->bytes[B_NAME]);
    column_free(c->occupancy, c->bytes[B_OCCUPANCY]);
    column_free(c->flags, c->bytes[B_FLAGS]);
    for (int i = 0; i < N_INT64; i++) column_free(c->ints[i], c->bytes[B_INTS + i]);
    free(c->extra_rows);
    free(c->extra_ids);
    packed_free(&c->flows);
    packed_free(&c->counters);
    free(c->memory);
}

/* ---- interning raw strings -------------------------------------------------------------- */

/* The strings are copied: the text they were read from is reused for the next piece. */
typedef struct {
    Py_ssize_t offset, length; /* in strings */
    uint64_t hash;
} Entry;

typedef struct {
    int32_t *slots;  /* open addressing: the id + 1 of the entry there, 0 where empty */
    Entry *entries;  /* by id */
    char *strings;   /* every entry's text, one after another */
    Py_ssize_t count, capacity, entries_capacity, strings_length, strings_capacity;
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
    int32_t *slots = calloc((size_t)capacity, sizeof(int32_t));
    if (slots == NULL) return -1;
    for (Py_ssize_t id = 0; id < t->count; id++) {
        Py_ssize_t j = (Py_ssize_t)(t->entries[id].hash & (uint64_t)(capacity - 1));
        while (slots[j] != 0) j = (j + 1) & (capacity - 1);
        slots[j] = (int32_t)(id + 1);
    }
    free(t->slots);
    t->slots = slots;
    t->capacity = capacity;
    return 0;
}

/* The id of a string (an empty string is a valid entry). */
static int32_t intern(Interner *t, const char *text, Py_ssize_t length) {
    if ((t->count + 1) * 2 > t->capacity && interner_resize(t, t->capacity ? t->capacity * 2 : 1024))
        return -1;
    uint64_t h = hash_bytes(text, length);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(t->capacity - 1));
    while (t->slots[j] != 0) {
        Entry *e = &t->entries[t->slots[j] - 1];
        if (e->hash == h && e->length == length &&
            memcmp(t->strings + e->offset, text, (size_t)length) == 0)
            return t->slots[j] - 1;
        j = (j + 1) & (t->capacity - 1);
    }
    if (grow(&t->entries, &t->entries_capacity, t->count + 1, sizeof(Entry), 1024) < 0 ||
        grow(&t->strings, &t->strings_capacity, t->strings_length + length + 1, 1, 65536) < 0)
        return -1;
    memcpy(t->strings + t->strings_length, text, (size_t)length);
    Entry entry = {t->strings_length, length, h};
    t->strings_length += length;
    t->entries[t->count] = entry;
    t->slots[j] = (int32_t)(t->count + 1);
    return (int32_t)t->count++;
}

static void interner_free(Interner *t) {
    free(t->slots);
    free(t->entries);
    free(t->strings);
}

/* ---- JSON lexing -------------------------------------------------------------------------- */

typedef struct {
    const char *p, *end, *base;
} Cursor;

#if (defined(__GNUC__) || defined(__clang__)) && defined(__SSE2__)
#include <emmintrin.h>
/* 16 bytes at a time (every x86-64 has SSE2): the text is a tenth white space (indentation),
 * and names and keys are read to their closing quote. */
#define SIXTEEN_AT_A_TIME 1

/* The bits of the 16 bytes at p that are JSON white space. */
static inline unsigned white_bits(const char *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i space = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')),
                                 _mm_cmpeq_epi8(v, _mm_set1_epi8('\n')));
    __m128i other = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\r')),
                                 _mm_cmpeq_epi8(v, _mm_set1_epi8('\t')));
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(space, other));
}

/* The bits of the 16 bytes at p that stop a run of plain string content: a quote, a
 * backslash, a control character (at most 0x1F: the unsigned minimum with 0x1F is itself). */
static inline unsigned string_stop_bits(const char *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i quote = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
    __m128i backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
    __m128i control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1F)), v);
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control));
}
#endif

static inline void skip_ws(Cursor *c) {
    const char *p = c->p, *end = c->end;
    if (p >= end || (unsigned char)*p > ' ') return; /* most calls: at a token already */
    if (end - p >= 2 && (unsigned char)p[1] > ' ' && *p == ' ') { /* ": ", ", ": one space */
        c->p = p + 1;
        return;
    }
#ifdef SIXTEEN_AT_A_TIME
    while (end - p >= 16) {
        unsigned token = ~white_bits(p) & 0xFFFFu;
        if (token) {
            c->p = p + __builtin_ctz(token);
            return;
        }
        p += 16;
    }
#endif
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    c->p = p;
}

#if (defined(__GNUC__) || defined(__clang__)) && defined(__BYTE_ORDER__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define WORD_AT_A_TIME 1
/* The flagged bytes (high bit set) of an 8-byte word that stop a run of plain string content: a
 * quote, a backslash, a control character. A borrow can also flag bytes above a flagged one, so
 * only the lowest flag is exact, and only it is used. */
static inline uint64_t string_stops(uint64_t w) {
    const uint64_t ones = UINT64_C(0x0101010101010101), highs = UINT64_C(0x8080808080808080);
    uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
    return (((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) | ((w - ones * 0x20) & ~w)) &
           highs;
}
#endif

#ifdef WORD_AT_A_TIME
/* Per byte of a word, zero where it is an ASCII digit (its high nibble is 3, and adding 6 does
 * not carry it past 9), else not: exact up to and including the first byte that is not a digit
 * (only a byte of 0xFA or more carries into the next). */
static inline uint64_t digit_misses(uint64_t w) {
    const uint64_t highs = UINT64_C(0xF0F0F0F0F0F0F0F0);
    return ((w & highs) | (((w + UINT64_C(0x0606060606060606)) & highs) >> 4)) ^
           UINT64_C(0x3333333333333333);
}

static const uint64_t POWERS_OF_TEN[8] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};

/* The value of 8 ASCII digits (first in the lowest byte): pairs, then fours, then all eight. */
static inline uint64_t digits_value(uint64_t w) {
    w = ((w & UINT64_C(0x0F0F0F0F0F0F0F0F)) * 2561) >> 8;
    w = ((w & UINT64_C(0x00FF00FF00FF00FF)) * 6553601) >> 16;
    return ((w & UINT64_C(0x0000FFFF0000FFFF)) * UINT64_C(42949672960001)) >> 32;
}
#endif

/* Four hex digits as a number, or -1. */
static int hex4(const char *h) {
    int value = 0;
    for (int k = 0; k < 4; k++) {
        char ch = h[k];
        int digit = ch >= '0' && ch <= '9'   ? ch - '0'
                    : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                    : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                             : -1;
        if (digit < 0) return -1;
        value = value * 16 + digit;
    }
    return value;
}

/* A string at c->p (on its opening quote): its raw content span, and whether it has escapes. */
static int lex_string_any(Cursor *c, const char **text, Py_ssize_t *length, int *escaped) {
    const char *start = c->p + 1, *q = start;
    *escaped = 0;
    while (q < c->end) {
#ifdef SIXTEEN_AT_A_TIME
        while (c->end - q >= 16) { /* names run to hundreds of bytes: 16 at a time */
            unsigned stops = string_stop_bits(q);
            if (stops != 0) {
                q += __builtin_ctz(stops);
                goto stop;
            }
            q += 16;
        }
#endif
#if defined(WORD_AT_A_TIME) && !defined(SIXTEEN_AT_A_TIME)
        while (c->end - q >= 8) { /* names run to hundreds of bytes: skip them 8 at a time */
            uint64_t word, stops;
            memcpy(&word, q, 8);
            if ((stops = string_stops(word)) != 0) {
                q += __builtin_ctzll(stops) >> 3;
                break;
            }
            q += 8;
        }
        if (q >= c->end) break;
#endif
#ifdef SIXTEEN_AT_A_TIME
    stop:
        if (q >= c->end) break; /* fewer than 16 bytes were left, none of them a stop */
#endif
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
        case 'u': {
            if (c->end - q < 6) return INCOMPLETE;
            int unit = hex4(q + 2);
            if (unit < 0 || (unit >= 0xDC00 && unit <= 0xDFFF)) return BAD;
            q += 6;
            if (unit >= 0xD800 && unit <= 0xDBFF) { /* a surrogate pair, or invalid as msgspec */
                if (c->end - q < 6) return INCOMPLETE; /* says: never half a character */
                int low = q[0] == '\\' && q[1] == 'u' ? hex4(q + 2) : -1;
                if (low < 0xDC00 || low > 0xDFFF) return BAD;
                q += 6;
            }
            break;
        }
        default:
            return BAD;
        }
    }
    return INCOMPLETE;
}

/* The same, inline: most strings (keys, phases, categories) end within 16 bytes, unescaped. */
static inline int lex_string(Cursor *c, const char **text, Py_ssize_t *length, int *escaped) {
#ifdef SIXTEEN_AT_A_TIME
    const char *start = c->p + 1;
    if (c->end - start >= 16) {
        unsigned stops = string_stop_bits(start);
        if (stops != 0 && start[__builtin_ctz(stops)] == '"') {
            const char *q = start + __builtin_ctz(stops);
            *text = start;
            *length = q - start;
            *escaped = 0;
            c->p = q + 1;
            return OK;
        }
    }
#endif
    return lex_string_any(c, text, length, escaped);
}

/* ``is_float`` of an integer beyond int64: readers of typed values hand it to Python. */
enum { BIG_INTEGER = 2 };

/* A number: exact int64 when integral and in range, else a double (is_float set). */
static int lex_number_any(Cursor *c, int64_t *integer, double *real, int *is_float) {
    const char *p = c->p, *start = c->p, *end = c->end;
    int negative = 0;
    *is_float = 0;
    if (p < end && *p == '-') {
        negative = 1;
        p++;
    }
    if (p >= end) return INCOMPLETE;
    const char *digits = p;
    uint64_t value = 0; /* accumulated as the digits go by: exact up to 19 digits */
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
#ifdef WORD_AT_A_TIME
        while (end - p >= 8) { /* times have 13-16 digits: 8 at a time while they last */
            uint64_t word;
            memcpy(&word, p, 8);
            uint64_t misses = digit_misses(word);
            if (misses != 0) { /* the last 1-7 digits: moved to the word's top, zeroes below */
                int k = __builtin_ctzll(misses) >> 3;
                if (k > 0) {
                    value = value * POWERS_OF_TEN[k] + digits_value(word << (8 * (8 - k)));
                    p += k;
                }
                break;
            }
            value = value * 100000000 + digits_value(word);
            p += 8;
        }
#endif
        while (p < end && *p >= '0' && *p <= '9') {
            value = value * 10 + (uint64_t)(*p - '0');
            p++;
        }
    } else {
        return BAD;
    }
    if (p < end && *p == '.') {
        *is_float = 1;
        p++;
        const char *fraction = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == fraction) return p >= end ? INCOMPLETE : BAD;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_float = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const char *exponent = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == exponent) return p >= end ? INCOMPLETE : BAD;
    }
    if (p >= end) return INCOMPLETE; /* a number is never the last byte of a whole event */
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
    if (p - digits > 18) { /* may not fit: again, checking each digit */
        value = 0;
        for (const char *q = digits; q < p; q++) {
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

/* The same, inline: most numbers (ids, sizes, durations) are integers of 1 to 7 digits. */
static inline int lex_number(Cursor *c, int64_t *integer, double *real, int *is_float) {
#ifdef WORD_AT_A_TIME
    const char *p = c->p;
    if (c->end - p >= 8 && *p >= '1' && *p <= '9') {
        uint64_t word;
        memcpy(&word, p, 8);
        uint64_t misses = digit_misses(word);
        if (misses != 0) {
            int k = __builtin_ctzll(misses) >> 3; /* 1 to 7 digits, then what ends them */
            if (p[k] != '.' && p[k] != 'e' && p[k] != 'E') {
                *is_float = 0;
                *integer = (int64_t)digits_value(word << (8 * (8 - k)));
                c->p = p + k;
                return OK;
            }
        }
    }
#endif
    return lex_number_any(c, integer, real, is_float);
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

/* At an object member: its key's raw span, then past the colon and white space to its value.
 * *escaped: the key holds escapes ("t\u0073" is "ts"), so its raw span is not its text. */
static inline int member_key_escaped(Cursor *c, const char **key, Py_ssize_t *length,
                                     int *escaped) {
    if (*c->p != '"') return BAD;
    int r = lex_string(c, key, length, escaped);
    if (r != OK) return r;
    skip_ws(c);
    if (c->p >= c->end) return INCOMPLETE;
    if (*c->p++ != ':') return BAD;
    skip_ws(c);
    return c->p >= c->end ? INCOMPLETE : OK;
}

static inline int member_key(Cursor *c, const char **key, Py_ssize_t *length) {
    int escaped;
    return member_key_escaped(c, key, length, &escaped);
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
enum { UNSUPPORTED = 3, LIMIT = 4 };

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
    /* Beyond INT64_MAX (INT64_MIN included): Python decides, and no cast or negation here
     * overflows (undefined behaviour). */
    if (value > (uint64_t)INT64_MAX) return UNSUPPORTED;
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
    /* null, a string...: the Python reader skips and counts the event (_bad_times) */
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
    if (negative > 1 || value > (uint64_t)INT64_MAX) return UNSUPPORTED;
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
        if (r == OK && !isfinite(*out)) *out = NAN; /* 1e400: unknown, as Python reads it */
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
    uint64_t head; /* its first 8 bytes (fewer: zeroes after), set by keys_ready() */
    int next;      /* the position + 1 of the next key of the same length, 0: none */
} Key;

#define KEY(text, code) {text, sizeof(text) - 1, code, 0, 0}

/* The longest key looked up (a longer one is no key of any set). */
enum { MAX_KEY_LENGTH = 31 };

/* Keys (ended by a NULL text), and per length the position + 1 of the first of that length
 * (0: none): a lookup compares only the keys of its length. */
typedef struct {
    Key *keys;
    int first[MAX_KEY_LENGTH + 1];
} KeySet;

/* HEAD_MASK[n]: the first n of 8 bytes (in memory order). */
static uint64_t HEAD_MASK[9];

static inline uint64_t head_of(const char *text, Py_ssize_t length) {
    uint64_t word;
    memcpy(&word, text, 8);
    return word & HEAD_MASK[length < 8 ? length : 8];
}

/* The code of a key in ``set``, or -1. Only the keys of its length are compared, 8 bytes at a
 * time where 8 bytes can be read (``end``): a call of memcmp per key cost more than the compare. */
static inline int key_code(const KeySet *set, const char *text, Py_ssize_t length, const char *end) {
    if (length > MAX_KEY_LENGTH) return -1;
    int at = set->first[length];
    if (at == 0) return -1;
    const Key *keys = set->keys;
    if (end - text < 8) {
        for (; at != 0; at = keys[at - 1].next)
            if (memcmp(keys[at - 1].text, text, (size_t)length) == 0) return keys[at - 1].code;
        return -1;
    }
    uint64_t head = head_of(text, length);
    for (; at != 0; at = keys[at - 1].next) {
        const Key *k = &keys[at - 1];
        if (k->head == head &&
            (length <= 8 || memcmp(k->text + 8, text + 8, (size_t)(length - 8)) == 0))
            return k->code;
    }
    return -1;
}

static void keys_ready(KeySet *set) {
    for (int n = 0; n <= 8; n++) {
        HEAD_MASK[n] = 0;
        memset(&HEAD_MASK[n], 0xff, (size_t)n);
    }
    memset(set->first, 0, sizeof set->first);
    int count = 0;
    while (set->keys[count].text != NULL) count++;
    for (int i = count - 1; i >= 0; i--) { /* each length's keys linked in table order */
        Key *k = &set->keys[i];
        char first[8] = {0};
        memcpy(first, k->text, (size_t)(k->length < 8 ? k->length : 8));
        k->head = head_of(first, k->length);
        k->next = set->first[k->length];
        set->first[k->length] = i + 1;
    }
}

/* A_MEMORY + M_*: the allocator's arguments (a "[memory]" event's; read as any event's). */
enum { A_GRID = N_INT_ARGS, A_BLOCK, A_OCCUPANCY, A_EXTRA, A_KEEP, A_MEMORY };
enum { MAX_KEPT = 16 };
static Key ARG_KEYS[] = {
    KEY("correlation", 0), KEY("stream", 1), KEY("device", 2), KEY("External id", 3),
    KEY("external id", 4), KEY("bytes", 5), KEY("Python id", 6), KEY("Python parent id", 7),
    KEY("size", 8), KEY("grid", A_GRID), KEY("block", A_BLOCK),
    KEY("est. achieved occupancy %", A_OCCUPANCY), KEY("Input Dims", A_EXTRA),
    KEY("Collective name", A_EXTRA), KEY("Call stack", A_EXTRA), KEY("fromDevice", A_EXTRA),
    KEY("toDevice", A_EXTRA), KEY("Input type", A_KEEP), KEY("Concrete Inputs", A_KEEP),
    KEY("In msg nelems", A_KEEP), KEY("Out msg nelems", A_KEEP), KEY("Group size", A_KEEP),
    KEY("dtype", A_KEEP), KEY("Process Group Name", A_KEEP), KEY("Process Group Ranks", A_KEEP),
    KEY("Bytes", A_MEMORY + M_BYTES), KEY("Addr", A_MEMORY + M_ADDR),
    KEY("Device Id", A_MEMORY + M_DEVICE), KEY("Device Type", A_MEMORY + M_TYPE),
    KEY("Total Allocated", A_MEMORY + M_ALLOCATED), KEY("Total Reserved", A_MEMORY + M_RESERVED),
    KEY("Ev Idx", A_MEMORY + M_ORDER), {NULL, 0, 0, 0, 0},
};
static KeySet ARG_SET = {ARG_KEYS, {0}};

enum { E_PH, E_CAT, E_NAME, E_PID, E_TID, E_TS, E_DUR, E_ARGS };
static Key EVENT_KEYS[] = {
    KEY("ph", E_PH), KEY("cat", E_CAT), KEY("name", E_NAME), KEY("pid", E_PID),
    KEY("tid", E_TID), KEY("ts", E_TS), KEY("dur", E_DUR), KEY("args", E_ARGS), {NULL, 0, 0, 0, 0},
};
static KeySet EVENT_SET = {EVENT_KEYS, {0}};

typedef struct {
    int64_t ints[N_INT_ARGS];
    int64_t grid, block;
    double occupancy;
    int extra;
    const char *start, *end;
    /* The members the model keeps (A_EXTRA, A_KEEP), from key to value; more than MAX_KEPT:
     * the whole args object is kept instead. */
    const char *kept[MAX_KEPT][2];
    int n_kept;
    /* The allocator's arguments, INT64_MIN where absent; memory_bad: one is not a plain
     * integer (a "[memory]" event then goes to the Python reader). Read in the one pass over
     * the arguments: a second pass over each [memory] event's cost a quarter of their scan. */
    int64_t memory[N_MEMORY_ARGS];
    int memory_bad;
} Args;

static void args_defaults(Args *a) {
    for (int i = 0; i < N_INT_ARGS; i++) a->ints[i] = -1;
    a->grid = a->block = -1;
    a->occupancy = NAN;
    a->extra = 0;
    a->start = a->end = NULL;
    a->n_kept = 0;
    for (int i = 0; i < N_MEMORY_ARGS; i++) a->memory[i] = INT64_MIN;
    a->memory_bad = 0;
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
        int escaped;
        if ((r = member_key_escaped(c, &key, &length, &escaped)) != OK) return r;
        if (escaped) *unsupported = 1; /* a key written with escapes: Python decodes it */
        int code = key_code(&ARG_SET, key, length, c->end);
        if (code >= 0 && code < N_INT_ARGS) {
            r = read_arg_int(c, &a->ints[code]);
        } else if (code == A_GRID) {
            r = read_dims(c, &a->grid);
        } else if (code == A_BLOCK) {
            r = read_dims(c, &a->block);
        } else if (code == A_OCCUPANCY) {
            r = read_real(c, &a->occupancy);
        } else if (code >= A_MEMORY) {
            if (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) {
                double real;
                int is_float;
                r = lex_number(c, &a->memory[code - A_MEMORY], &real, &is_float);
                if (r == OK && is_float) a->memory_bad = 1;
            } else {
                r = skip_value(c, 1);
                a->memory_bad = 1;
            }
        } else {
            if (code == A_EXTRA && !is_null(c)) a->extra = 1;
            r = skip_value(c, 1);
            if ((code == A_EXTRA || code == A_KEEP) && r == OK) {
                if (a->n_kept < MAX_KEPT) {
                    a->kept[a->n_kept][0] = key - 1; /* its opening quote */
                    a->kept[a->n_kept][1] = c->p;
                }
                a->n_kept++;
            }
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
    Interner extras; /* the distinct texts of the arguments kept (see read_args) */
    Text scratch;    /* one event's kept arguments, as a JSON object */
    Py_ssize_t events, rows_hint;
    Py_ssize_t max_bytes; /* the most memory the columns may take (LIMIT beyond) */
    const char *error; /* why the scan stopped with BAD / UNSUPPORTED / LIMIT */
    Py_ssize_t error_at;
} Scan;

static const char PHASES[] = "XBEiIsftPNODCbneMRcVpSTF";

/* The memory the scan's results take so far (the columns as filled, the copied texts). */
static Py_ssize_t scan_bytes(const Scan *s) {
    const Columns *c = &s->columns;
    return c->rows * columns_row_bytes(c) + c->flows.length + c->counters.length + c->memory_rows * MEMORY_COLUMNS * 8 + c->n_extras * 12 + s->extras.strings_length +
           s->names.strings_length + s->cats.strings_length;
}

/* The id of an event's kept arguments: the members the model keeps, as one JSON object (the
 * same recorded shapes recur at every step: each distinct text is kept once). */
static int32_t intern_kept(Scan *s, const Args *a) {
    Text *t = &s->scratch;
    t->length = 0;
    if (a->n_kept > MAX_KEPT) return intern(&s->extras, a->start, a->end - a->start);
    for (int i = 0; i < a->n_kept; i++) {
        Py_ssize_t length = a->kept[i][1] - a->kept[i][0];
        if (grow(&t->data, &t->capacity, t->length + length + 2, 1, 4096) < 0) return -1;
        t->data[t->length++] = i == 0 ? '{' : ',';
        memcpy(t->data + t->length, a->kept[i][0], (size_t)length);
        t->length += length;
    }
    if (grow(&t->data, &t->capacity, t->length + 2, 1, 4096) < 0) return -1;
    if (a->n_kept == 0) t->data[t->length++] = '{';
    t->data[t->length++] = '}';
    return intern(&s->extras, t->data, t->length);
}

/* ---- the allocator's [memory] events ------------------------------------------------------ */

/* A [memory] event's arguments (read_args read them) as a row; events without all of the
 * first six, of the CPU (Device Type 0) or of no device are left out. A value that is not a
 * plain integer is UNSUPPORTED: the Python reader reads the file. */
static int keep_memory(Scan *s, const Args *args, int64_t ts, int64_t tid) {
    if (args->memory_bad) {
        s->error = "a [memory] event with a value of an unexpected type";
        return UNSUPPORTED;
    }
    int64_t m[N_MEMORY_ARGS];
    memcpy(m, args->memory, sizeof m);
    for (int i = 0; i < M_ORDER; i++)
        if (m[i] == INT64_MIN) return OK;
    if (m[M_TYPE] == 0 || m[M_DEVICE] < 0) return OK; /* the CPU's memory, or no device */
    if (m[M_ORDER] == INT64_MIN) m[M_ORDER] = -1;
    Columns *col = &s->columns;
    if (grow(&col->memory, &col->memory_capacity, (col->memory_rows + 1) * MEMORY_COLUMNS, 8,
             1024 * MEMORY_COLUMNS) < 0)
        return BAD;
    int64_t *row = col->memory + col->memory_rows * MEMORY_COLUMNS;
    row[0] = ts;
    row[1] = tid;
    memcpy(row + 2, m, sizeof m);
    col->memory_rows++;
    return OK;
}

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
        if ((r = member_key_escaped(c, &key, &length, &escaped)) != OK) return r;
        if (escaped) { /* "t\u0073" is "ts" to a JSON parser: leave the document to Python */
            s->error = "a key written with escapes";
            return UNSUPPORTED;
        }
        int is_string = *c->p == '"';
        int code = key_code(&EVENT_SET, key, length, c->end);
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
    /* No phase, or one of no known meaning: an event the model does not use, as the Python
     * reader skips it (its phase is not "X"). Not a reason to leave the whole file to it. */
    if (phase == 0 || phase == '?') {
        s->error = NULL;
        return OK;
    }
    if (phase == 's' || phase == 'f' || phase == 't' || phase == 'C') { /* C: counter samples */
        Packed *text = phase == 'C' ? &s->columns.counters : &s->columns.flows;
        return packed_append(text, event_start, c->p - event_start) < 0 ? BAD : OK;
    }
    /* The caching allocator's events (an allocation or a free, with the totals after it): kept
     * as text, few beside the complete events, and decoded in Python. */
    if (phase == 'i' && name_length == 8 && memcmp(name, "[memory]", 8) == 0)
        return unsupported ? UNSUPPORTED : keep_memory(s, &args, ts, tid);
    if (phase != 'X') return OK;
    if (unsupported) {
        s->error = "a complete event with a value of an unexpected type";
        return UNSUPPORTED;
    }
    Columns *col = &s->columns;
    /* Allocated once for the rows the text may hold (see scan_file): pages never written cost
     * nothing, and growing would copy. */
    if (col->rows == col->capacity && columns_grow(col, s->rows_hint) < 0) return BAD;
    if ((col->rows & 4095) == 0 && scan_bytes(s) > s->max_bytes) {
        s->error = "memory";
        return LIMIT;
    }
    Py_ssize_t row = col->rows;
    int32_t cat_id = intern(&s->cats, cat, cat_length);
    int32_t name_id = intern(&s->names, name, name_length);
    if (cat_id < 0 || name_id < 0) return BAD;
    col->cat[row] = cat_id;
    col->name[row] = name_id;
    col->flags[row] = (uint8_t)float_ts;
    int failed = columns_put(col, C_TS, row, ts) < 0;
    failed |= columns_put(col, C_DUR, row, dur) < 0;
    failed |= columns_put(col, C_PID, row, pid) < 0;
    failed |= columns_put(col, C_TID, row, tid) < 0;
    for (int i = 0; i < N_INT_ARGS; i++)
        failed |= columns_put(col, C_CORRELATION + i, row, args.ints[i]) < 0;
    failed |= columns_put(col, C_GRID, row, args.grid) < 0;
    failed |= columns_put(col, C_BLOCK, row, args.block) < 0;
    if (failed) return BAD;
    /* float32, as the model keeps it; a figure out of range stays out of range (it is counted
     * and dropped on the Python side), where rounding could bring 100.00000001 down to 100. */
    double occupancy = args.occupancy;
    col->occupancy[row] = isnan(occupancy)   ? NAN
                          : occupancy < 0    ? -1.0f
                          : occupancy > 100 ? INFINITY
                                             : (float)occupancy;
    if (args.extra) {
        int32_t id = intern_kept(s, &args);
        if (id < 0 || extras_push(col, row, id) < 0) return BAD;
    }
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

/* ---- the text: a file's bytes, inflated piece by piece when gzip ------------------------- */

/* zlib-ng's own API, taken from the zlib_ng package's extension module when it exports it (its
 * wheels link zlib-ng in): it inflates about twice as fast as the system's zlib. The stream's
 * layout is zlib-ng.h's (2.x); anything else found there, or nothing, and zlib inflates. */
typedef struct {
    const uint8_t *next_in;
    uint32_t avail_in;
    size_t total_in;
    uint8_t *next_out;
    uint32_t avail_out;
    size_t total_out;
    const char *msg;
    void *state, *zalloc, *zfree, *opaque;
    int32_t data_type;
    uint32_t adler;
    unsigned long reserved;
} NgStream;

static struct {
    int32_t (*init2)(NgStream *, int32_t);
    int32_t (*inflate)(NgStream *, int32_t);
    int32_t (*reset)(NgStream *);
    int32_t (*end)(NgStream *);
} NG;

#ifdef __unix__
#include <dlfcn.h>
#endif

/* use_zlib_ng(path): inflate with the zlib-ng in the (loaded) shared library at ``path``, or with
 * zlib (path None); whether zlib-ng inflates now. */
static PyObject *use_zlib_ng(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "z", &path)) return NULL;
    memset(&NG, 0, sizeof NG);
#ifdef __unix__
    void *library = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (library != NULL) {
        const char *(*version)(void) = (const char *(*)(void))dlsym(library, "zlibng_version");
        if (version != NULL && strncmp(version(), "2.", 2) == 0) {
            *(void **)&NG.init2 = dlsym(library, "zng_inflateInit2");
            *(void **)&NG.inflate = dlsym(library, "zng_inflate");
            *(void **)&NG.reset = dlsym(library, "zng_inflateReset");
            *(void **)&NG.end = dlsym(library, "zng_inflateEnd");
        }
        if (!NG.init2 || !NG.inflate || !NG.reset || !NG.end) memset(&NG, 0, sizeof NG);
    }
#endif
    return PyBool_FromLong(NG.inflate != NULL);
}

/* The file's bytes, read from its descriptor a slice at a time (never the whole file at once).
 * buf[used:length] is read and not yet consumed. */
enum { INPUT_BYTES = 1 << 20 };
typedef struct {
    int fd;
    unsigned char *buf;
    Py_ssize_t length, used;
    int eof, error; /* error: the errno of a failed read */
} Input;

/* Read more after what is left unconsumed (moved to the front): the bytes read, 0 at the end of
 * the file, -1 on a read error (in->error). */
static Py_ssize_t input_more(Input *in) {
    if (in->eof) return 0;
    if (in->used > 0) {
        memmove(in->buf, in->buf + in->used, (size_t)(in->length - in->used));
        in->length -= in->used;
        in->used = 0;
    }
    for (;;) {
        Py_ssize_t n = read(in->fd, in->buf + in->length, (size_t)(INPUT_BYTES - in->length));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            in->error = errno;
            return -1;
        }
        if (n == 0) in->eof = 1;
        in->length += n;
        return n;
    }
}

/* Gzip members follow one another while the next one starts with the gzip magic bytes; zero
 * bytes after the last member (padding) end the text, anything else is corrupt data (junk
 * appended to the file would otherwise be dropped unsaid), as in _io.py and _scan.py. Input
 * that stops mid-stream ends the text too (truncated). */
typedef struct {
    Input *in;
    Py_ssize_t produced, max_text; /* text inflated so far; the most allowed (LIMIT beyond) */
    int ng; /* zlib-ng's stream rather than zlib's */
    union {
        z_stream z;
        NgStream ng;
    } s;
    int live, ended, truncated;
    int error; /* inflate's error code, with message, when the data is corrupt (or no memory) */
    char message[160];
} Inflater;

enum { Z_LIMIT = 1000, Z_READ = 1001 }; /* Inflater.error beyond zlib's own codes */
#define JUNK_AFTER_GZIP "data after the last gzip member that is not gzip"

static int inflater_open(Inflater *f, Input *in, Py_ssize_t max_text) {
    memset(f, 0, sizeof *f);
    f->in = in;
    f->max_text = max_text;
    f->ng = NG.inflate != NULL;
    int r = f->ng ? NG.init2(&f->s.ng, 16 + MAX_WBITS) : inflateInit2(&f->s.z, 16 + MAX_WBITS);
    if (r != Z_OK) return -1;
    f->live = 1;
    return 0;
}

static void inflater_close(Inflater *f) {
    if (f->live) f->ng ? NG.end(&f->s.ng) : inflateEnd(&f->s.z);
    f->live = 0;
}

static Py_ssize_t inflater_fail(Inflater *f, int code, const char *message) {
    f->error = code;
    snprintf(f->message, sizeof f->message, "%s", message);
    return -1;
}

/* One call of inflate from in[0:*used] into out[0:*made]: both updated to what it did. */
static int inflate_step(Inflater *f, const unsigned char *in, uint32_t *used, char *out,
                        uint32_t *made, const char **message) {
    if (f->ng) {
        NgStream *z = &f->s.ng;
        z->next_in = in;
        z->avail_in = *used;
        z->next_out = (uint8_t *)out;
        z->avail_out = *made;
        int r = NG.inflate(z, Z_NO_FLUSH);
        *used -= z->avail_in;
        *made -= z->avail_out;
        *message = z->msg;
        return r;
    }
    z_stream *z = &f->s.z;
    z->next_in = (Bytef *)in;
    z->avail_in = *used;
    z->next_out = (Bytef *)out;
    z->avail_out = *made;
    int r = inflate(z, Z_NO_FLUSH);
    *used -= z->avail_in;
    *made -= z->avail_out;
    *message = z->msg;
    return r;
}

/* Inflate into out[0:room]: the bytes written (0 once the text has ended), or -1 (f->error). */
static Py_ssize_t inflater_run(Inflater *f, char *out, Py_ssize_t room) {
    Py_ssize_t produced = 0;
    Input *in = f->in;
    while (!f->ended && produced < room) {
        if (in->used == in->length && input_more(in) < 0)
            return inflater_fail(f, Z_READ, strerror(in->error));
        Py_ssize_t left = in->length - in->used, space = room - produced;
        uint32_t used = (uint32_t)(left > UINT32_MAX ? UINT32_MAX : left);
        uint32_t made = (uint32_t)(space > UINT32_MAX ? UINT32_MAX : space), room_made = made;
        const char *message;
        int r = inflate_step(f, in->buf + in->used, &used, out + produced, &made, &message);
        in->used += used;
        produced += made;
        f->produced += made;
        if (f->produced > f->max_text) return inflater_fail(f, Z_LIMIT, "inflates past the limit");
        if (r == Z_STREAM_END) {
            while (in->length - in->used < 2 && !in->eof)
                if (input_more(in) < 0) return inflater_fail(f, Z_READ, strerror(in->error));
            Py_ssize_t next = in->used;
            if (in->length - next >= 2 && in->buf[next] == 0x1f && in->buf[next + 1] == 0x8b) {
                r = f->ng ? NG.reset(&f->s.ng) : inflateReset(&f->s.z);
                if (r != Z_OK) return inflater_fail(f, Z_STREAM_ERROR, "reset");
            } else {
                for (;;) { /* only zero bytes may follow the last member */
                    for (Py_ssize_t i = in->used; i < in->length; i++)
                        if (in->buf[i] != 0)
                            return inflater_fail(f, Z_DATA_ERROR, JUNK_AFTER_GZIP);
                    in->used = in->length;
                    if (in->eof) break;
                    if (input_more(in) < 0) return inflater_fail(f, Z_READ, strerror(in->error));
                }
                f->ended = 1;
            }
        } else if (r == Z_BUF_ERROR || (r == Z_OK && in->used == in->length && made < room_made)) {
            if (in->eof) f->ended = f->truncated = 1; /* the input ran out mid-stream */
        } else if (r != Z_OK) {
            return inflater_fail(f, r, message ? message : "invalid data");
        }
    }
    return produced;
}

#ifndef _WIN32
#define INFLATE_ON_A_THREAD 1
#include <pthread.h>

/* Inflating on a thread of its own, up to RING pieces ahead of the scanner: inflating and
 * scanning take about as long as each other. Started once the caller waits for the scan (see
 * Source.hurry): before that, a second busy thread would only slow the caller down. */
enum { RING = 2 };
typedef struct {
    Inflater *f; /* the source's, the inflater thread's until it has finished */
    Py_ssize_t piece;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    char *data[RING];
    Py_ssize_t size[RING];
    int head, count, finished, stop;
} Pipe;

static void *inflate_pieces(void *arg) {
    Pipe *p = arg;
    for (;;) {
        char *buffer = malloc((size_t)p->piece);
        Py_ssize_t n = buffer ? inflater_run(p->f, buffer, p->piece)
                              : inflater_fail(p->f, Z_MEM_ERROR, "out of memory");
        pthread_mutex_lock(&p->lock);
        while (n > 0 && p->count == RING && !p->stop) pthread_cond_wait(&p->changed, &p->lock);
        if (n > 0 && !p->stop) {
            int tail = (p->head + p->count) % RING;
            p->data[tail] = buffer;
            p->size[tail] = n;
            p->count++;
            buffer = NULL;
        }
        int last = n <= 0 || p->f->ended || p->stop;
        p->finished = last;
        pthread_cond_broadcast(&p->changed);
        pthread_mutex_unlock(&p->lock);
        free(buffer);
        if (last) return NULL;
    }
}

/* The next piece (the caller frees it), or NULL once the inflater has finished. */
static char *pipe_take(Pipe *p, Py_ssize_t *size) {
    char *piece = NULL;
    pthread_mutex_lock(&p->lock);
    while (p->count == 0 && !p->finished) pthread_cond_wait(&p->changed, &p->lock);
    if (p->count > 0) {
        piece = p->data[p->head];
        *size = p->size[p->head];
        p->head = (p->head + 1) % RING;
        p->count--;
        pthread_cond_broadcast(&p->changed);
    }
    pthread_mutex_unlock(&p->lock);
    return piece;
}

/* Go on inflating ``f`` on a thread of its own. */
static Pipe *pipe_open(Inflater *f, Py_ssize_t piece) {
    Pipe *p = calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->f = f;
    p->piece = piece;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->changed, NULL);
    if (pthread_create(&p->thread, NULL, inflate_pieces, p) != 0) {
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->changed);
        free(p);
        return NULL;
    }
    return p;
}

static void pipe_close(Pipe *p) {
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->thread, NULL);
    for (int i = 0; i < p->count; i++) free(p->data[(p->head + i) % RING]);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->changed);
    free(p);
}
#else
typedef struct Pipe Pipe;
#endif

/* The text the scanner reads: a window over the file's text, text[0:length] not yet consumed.
 * Plain files are their own window; gzip files are inflated into it, here or on a thread. */
typedef struct {
    int gzip, ended, truncated; /* ended: no more text will come */
    Input in;
    Inflater f;
    Pipe *pipe;                 /* once inflating on a thread: pieces come from it */
    const char *hurry;          /* set (by another thread) once the caller waits for the scan */
    char *text;
    Py_ssize_t length, capacity, piece;
} Source;

/* Returns -1 when out of memory, -2 when the file cannot be read (s->in.error), else 0. */
static int source_open(Source *s, int fd, Py_ssize_t piece, Py_ssize_t max_text,
                       const char *hurry) {
    memset(s, 0, sizeof *s);
    s->in.fd = fd;
    s->in.buf = malloc(INPUT_BYTES);
    if (s->in.buf == NULL) return -1;
    while (s->in.length < 2 && !s->in.eof)
        if (input_more(&s->in) < 0) return -2;
    s->gzip = s->in.length >= 2 && s->in.buf[0] == 0x1f && s->in.buf[1] == 0x8b;
    s->hurry = hurry;
    s->piece = piece;
    if (!s->gzip) return 0;
    return inflater_open(&s->f, &s->in, max_text);
}

static int hurried(const char *flag) {
#if defined(__GNUC__) || defined(__clang__)
    return flag != NULL && __atomic_load_n(flag, __ATOMIC_RELAXED) != 0;
#else
    return flag != NULL && *(const volatile char *)flag != 0;
#endif
}

static void source_close(Source *s) {
#ifdef INFLATE_ON_A_THREAD
    if (s->pipe != NULL) pipe_close(s->pipe);
#endif
    inflater_close(&s->f);
    free(s->text);
    free(s->in.buf);
}

/* Drop the window's first ``count`` bytes (consumed). */
static void source_drop(Source *s, Py_ssize_t count) {
    memmove(s->text, s->text + count, (size_t)(s->length - count));
    s->length -= count;
}

/* Fill the window until it holds at least ``want`` bytes or the text ends. Returns -1 when out of
 * memory or the data is corrupt (*error set from the inflater), else 0. */
static int source_fill(Source *s, Py_ssize_t want, Inflater **error) {
    while (!s->ended && s->length < want) {
        if (grow(&s->text, &s->capacity, want, 1, want) < 0) return -1;
        if (!s->gzip) { /* plain text: what is left of the first read, then straight from the file */
            Input *in = &s->in;
            Py_ssize_t room = s->capacity - s->length, n = in->length - in->used;
            if (n > 0) {
                n = n < room ? n : room;
                memcpy(s->text + s->length, in->buf + in->used, (size_t)n);
                in->used += n;
            } else {
                do n = read(in->fd, s->text + s->length, (size_t)room);
                while (n < 0 && errno == EINTR);
                if (n < 0) {
                    in->error = errno;
                    s->f.error = Z_READ;
                    snprintf(s->f.message, sizeof s->f.message, "%s", strerror(errno));
                    *error = &s->f;
                    return -1;
                }
                s->ended = n == 0;
            }
            s->length += n;
            continue;
        }
#ifdef INFLATE_ON_A_THREAD
        if (s->pipe == NULL && hurried(s->hurry)) s->pipe = pipe_open(&s->f, s->piece);
        if (s->pipe != NULL) {
            Py_ssize_t size;
            char *piece = pipe_take(s->pipe, &size);
            if (piece == NULL) { /* finished: the inflater thread is done with s->f */
                s->ended = 1;
                s->truncated = s->f.truncated;
                if (s->f.error) *error = &s->f;
                return s->f.error ? -1 : 0;
            }
            if (grow(&s->text, &s->capacity, s->length + size, 1, want) < 0) {
                free(piece);
                return -1;
            }
            memcpy(s->text + s->length, piece, (size_t)size);
            s->length += size;
            free(piece);
            continue;
        }
#endif
        Py_ssize_t n = inflater_run(&s->f, s->text + s->length, s->capacity - s->length);
        if (n < 0) {
            *error = &s->f;
            return -1;
        }
        s->length += n;
        s->ended = s->f.ended;
        s->truncated = s->f.truncated;
    }
    return 0;
}

/* The offset of the events array's first byte: past the first ``"traceEvents"``, optional
 * white space, ``:``, white space and ``[`` (the Python reader's ARRAY_START). -1: not in
 * text[from:length]; *resume is where to search again once more text has come. */
static Py_ssize_t events_start(const char *text, Py_ssize_t length, Py_ssize_t from,
                               Py_ssize_t *resume, Py_ssize_t *key_at) {
    static const char KEY[] = "\"traceEvents\"";
    const Py_ssize_t n = sizeof KEY - 1;
    for (Py_ssize_t i = from; i + n <= length; i++) {
        const char *hit = memchr(text + i, '"', (size_t)(length - i));
        if (hit == NULL) break;
        i = hit - text;
        if (i + n > length) {
            *resume = i;
            return -1;
        }
        if (memcmp(hit, KEY, (size_t)n) != 0) continue;
        Py_ssize_t j = i + n;
        while (j < length && text[j] != '\0' && strchr(" \t\n\r\f\v", text[j])) j++;
        if (j < length && text[j] == ':') {
            j++;
            while (j < length && text[j] != '\0' && strchr(" \t\n\r\f\v", text[j])) j++;
            if (j < length && text[j] == '[') {
                *key_at = i;
                return j + 1;
            }
        }
        if (j >= length) { /* cut before we know: look again with more text */
            *resume = i;
            return -1;
        }
    }
    *resume = length > n ? length - n : 0;
    return -1;
}

/* The largest header searched for the events array before giving up (as the Python reader). */
#define HEADER_LIMIT ((Py_ssize_t)64 << 20)
/* The text after the events array (the document's other keys) is decoded whole in Python: held
 * here and there, copied while closed as a JSON object, then decoded into objects. Against the
 * budget it counts this many times its length (gpuscope.readers._scan.TAIL_FACTOR); a longer one
 * (a second events array, junk) is not scanned: the whole-document reader, within its own
 * bound, says what the file is. */
#define TAIL_FACTOR 8
#define TAIL_TOO_LONG "the text after the events array is longer than the scanner keeps"

typedef struct {
    Text header, tail; /* the document around the events array (Text used as a plain buffer) */
    int done, truncated;
    const char *error; /* why it stopped: not scannable (s.error), or NULL */
} Outcome;

static int buffer_append(Text *t, const char *span, Py_ssize_t length) {
    if (grow(&t->data, &t->capacity, t->length + length + 1, 1, 4096) < 0) return -1;
    memcpy(t->data + t->length, span, (size_t)length);
    t->length += length;
    return 0;
}

/* The whole file, without the GIL: find the events array, scan its events piece by piece,
 * keep the text around it. Returns OK; BAD / UNSUPPORTED (s->error set) when the scanner does
 * not follow it; -1 when out of memory or the gzip data is corrupt (*error: the inflater). */
static int scan_source(Source *src, Scan *s, Outcome *out, Py_ssize_t piece, Inflater **error) {
    Py_ssize_t resume = 0, key_at = 0, start = -1;
    while (start < 0) {
        if (source_fill(src, src->length + piece, error) < 0) return -1;
        start = events_start(src->text, src->length, resume, &resume, &key_at);
        if (start < 0 && (src->ended || src->length > HEADER_LIMIT)) {
            s->error = "no events array (\"traceEvents\") where the scanner looks for one";
            return UNSUPPORTED;
        }
    }
    if (buffer_append(&out->header, src->text, key_at) < 0) return -1;
    source_drop(src, start);
    Py_ssize_t want = piece;
    for (;;) {
        if (source_fill(src, want, error) < 0) return -1;
        Cursor c = {src->text, src->text + src->length, src->text};
        const char *consumed;
        int r = scan_events(&c, s, s->events == 0, &consumed, &out->done);
        if (r != OK) return r;
        Py_ssize_t used = consumed - src->text;
        if (out->done) {
            if (buffer_append(&out->tail, consumed, src->length - used) < 0) return -1;
            source_drop(src, src->length);
            while (!src->ended) { /* the rest of the document, within the memory budget */
                if (TAIL_FACTOR * out->tail.length + scan_bytes(s) > s->max_bytes) {
                    s->error = TAIL_TOO_LONG;
                    return UNSUPPORTED;
                }
                if (source_fill(src, piece, error) < 0 ||
                    buffer_append(&out->tail, src->text, src->length) < 0)
                    return -1;
                source_drop(src, src->length);
            }
            if (TAIL_FACTOR * out->tail.length + scan_bytes(s) > s->max_bytes) {
                s->error = TAIL_TOO_LONG;
                return UNSUPPORTED;
            }
            break;
        }
        source_drop(src, used);
        if (src->ended) { /* the events array never closes: the file ends mid-write */
            out->truncated = 1;
            break;
        }
        /* No whole event in the window: one event is longer than it, read on, within the
         * memory the scan may take. */
        want = used == 0 ? src->length * 2 : piece;
        if (want + scan_bytes(s) > s->max_bytes) {
            s->error = "memory";
            return LIMIT;
        }
    }
    out->truncated |= src->truncated;
    return OK;
}

/* ---- Python glue ---------------------------------------------------------------------------- */

static PyObject *GzipError;

static PyObject *strings_list(Interner *t) {
    PyObject *list = PyList_New(t->count);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < t->count; i++) {
        PyObject *item =
            PyBytes_FromStringAndSize(t->strings + t->entries[i].offset, t->entries[i].length);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* A column handed over without a copy: a read-only buffer (numpy.frombuffer reads it) that owns
 * the scanner's memory and frees it with the last array that uses it. */
typedef struct {
    PyObject_HEAD
    void *data;
    Py_ssize_t size;
    size_t mapped; /* the bytes of its mapping (see column_resize); 0: from malloc */
} Block;

static int block_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Block *block = (Block *)self;
    return PyBuffer_FillInfo(view, self, block->data ? block->data : (void *)"", block->size, 1,
                             flags);
}

static void block_dealloc(PyObject *self) {
    Block *block = (Block *)self;
    if (block->mapped)
        column_free(block->data, block->mapped);
    else
        free(block->data);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs BLOCK_BUFFER = {block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gpuscope.readers._kscan.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = block_dealloc,
    .tp_as_buffer = &BLOCK_BUFFER,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column of the scanner's, as a read-only buffer.",
};

/* A buffer handed over as a Block: its memory (``mapped`` bytes, or 0 when from malloc) goes
 * with it, and on failure is freed here. */
static PyObject *block_of(void *data, Py_ssize_t size, size_t mapped) {
    Block *block = PyObject_New(Block, &BlockType);
    if (block == NULL) {
        if (mapped)
            column_free(data, mapped);
        else
            free(data);
        return NULL;
    }
    block->data = data;
    block->size = data ? size : 0;
    block->mapped = data ? mapped : 0;
    return (PyObject *)block;
}

/* Hand a column over (see block_of). */
static int put_column(PyObject *dict, const char *key, void *data, Py_ssize_t size, size_t mapped) {
    PyObject *block = block_of(data, size, mapped);
    if (block == NULL) return -1;
    int r = PyDict_SetItemString(dict, key, block);
    Py_DECREF(block);
    return r;
}

/* A packed array handed over as a Block, without a copy: plain text starts with its "[",
 * deflated bytes with the "Z" put before them; empty when nothing was packed. NULL with an
 * exception set on failure. */
static PyObject *packed_block(Packed *p) {
    if (p->text_length == 0) return block_of(NULL, 0, 0);
    if (packed_put(p, "]", 1, Z_FINISH) < 0) return PyErr_NoMemory();
    PyObject *block = block_of(p->data, p->length, 0);
    p->data = NULL;
    p->length = p->capacity = 0;
    return block;
}

static PyObject *columns_result(Scan *s) {
    Columns *col = &s->columns;
    Py_ssize_t n = col->rows;
    PyObject *result = NULL, *columns = NULL, *cats = NULL, *names = NULL, *extra_rows = NULL;
    PyObject *extras = NULL, *flows = NULL, *counters = NULL, *memory = NULL;
    columns = PyDict_New();
    if (columns == NULL) goto finally;
    int failed = put_column(columns, "cat", col->cat, n * 4, col->bytes[B_CAT]) < 0;
    failed |= put_column(columns, "name", col->name, n * 4, col->bytes[B_NAME]) < 0;
    failed |= put_column(columns, "occupancy", col->occupancy, n * 4, col->bytes[B_OCCUPANCY]) < 0;
    failed |= put_column(columns, "float_time", col->flags, n, col->bytes[B_FLAGS]) < 0;
    for (int i = 0; i < N_INT64; i++) {
        failed |= put_column(columns, INT64_NAMES[i], col->ints[i], n * (col->wide[i] ? 8 : 4),
                             col->bytes[B_INTS + i]) < 0;
        col->ints[i] = NULL;
    }
    col->cat = col->name = NULL;
    col->occupancy = NULL;
    col->flags = NULL;
    if (failed) goto finally;
    if ((cats = strings_list(&s->cats)) == NULL || (names = strings_list(&s->names)) == NULL)
        goto finally;
    extra_rows = PyBytes_FromStringAndSize(
        col->extra_rows ? (const char *)col->extra_rows : "", col->n_extras * 8);
    if (extra_rows == NULL) goto finally;
    extras = Py_BuildValue("(y#N)", col->extra_ids ? (const char *)col->extra_ids : "",
                           col->n_extras * 4, strings_list(&s->extras));
    if (extras == NULL) goto finally;
    if ((flows = packed_block(&col->flows)) == NULL) goto finally;
    if ((counters = packed_block(&col->counters)) == NULL) goto finally;
    memory = block_of(col->memory, col->memory_rows * MEMORY_COLUMNS * 8, 0);
    col->memory = NULL;
    if (memory == NULL) goto finally;
    result = Py_BuildValue("(nnOOOOOOOO)", s->events, n, columns, cats, names, extra_rows, extras,
                           flows, counters, memory);
finally:
    Py_XDECREF(columns);
    Py_XDECREF(cats);
    Py_XDECREF(names);
    Py_XDECREF(extra_rows);
    Py_XDECREF(extras);
    Py_XDECREF(flows);
    Py_XDECREF(counters);
    Py_XDECREF(memory);
    return result;
}

/* The rows to allocate at first: one per 128 bytes of text, which no Kineto trace exceeds (its
 * events take 150-300 bytes). A gzip file's text size is in its last 4 bytes (modulo 4 GiB,
 * and of its last member only), believed up to 32 times the file's size. */
static Py_ssize_t rows_hint(int fd, int gzip) {
    struct stat status;
    if (fstat(fd, &status) != 0) return 4096;
    Py_ssize_t length = (Py_ssize_t)status.st_size, text = length;
    unsigned char t[4];
    if (gzip && length >= 18 && pread(fd, t, 4, (off_t)(length - 4)) == 4) {
        uint32_t size = (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
        text = (Py_ssize_t)size < length * 32 ? (Py_ssize_t)size : length * 32;
    }
    return text / 128 + 4096;
}

static PyObject *LimitError;

static void set_limit_error(const char *what, Py_ssize_t amount) {
    PyObject *value = Py_BuildValue("(sn)", what, amount);
    if (value == NULL) return;
    PyErr_SetObject(LimitError, value);
    Py_DECREF(value);
}

static PyObject *scan_file(PyObject *self, PyObject *args) {
    int fd;
    Py_buffer hurry = {0};
    Py_ssize_t piece, max_text, max_bytes;
    if (!PyArg_ParseTuple(args, "inw*nn", &fd, &piece, &hurry, &max_text, &max_bytes))
        return NULL;
    if (piece < 16) piece = 16;
    Scan s;
    Source src;
    Outcome out;
    memset(&s, 0, sizeof s);
    memset(&out, 0, sizeof out);
    PyObject *result = NULL;
    int r;
    Inflater *error = NULL;
    s.max_bytes = max_bytes;
    Py_BEGIN_ALLOW_THREADS
    r = source_open(&src, fd, piece, max_text, hurry.len > 0 ? hurry.buf : NULL);
    if (r == 0) {
        s.rows_hint = rows_hint(fd, src.gzip);
        r = scan_source(&src, &s, &out, piece, &error);
    }
    Py_END_ALLOW_THREADS
    if (r == -2 || (r < 0 && error != NULL && error->error == Z_READ)) {
        errno = src.in.error;
        PyErr_SetFromErrno(PyExc_OSError);
    } else if (r < 0 && error != NULL && error->error == Z_LIMIT) {
        set_limit_error("text", error->produced);
    } else if (r == LIMIT) {
        set_limit_error("memory", scan_bytes(&s));
    } else if (r < 0) {
        if (error != NULL && error->error != Z_MEM_ERROR)
            PyErr_Format(GzipError, "Error %d while decompressing data: %s", error->error,
                         error->message);
        else
            PyErr_NoMemory();
    } else if (r != OK) {
        PyErr_Format(PyExc_ValueError, "%s (event at byte %zd)", s.error ? s.error : "invalid",
                     s.error_at);
    } else {
        PyObject *scanned = columns_result(&s);
        if (scanned != NULL) {
            result = Py_BuildValue("(y#Ny#O)", out.header.data ? out.header.data : "",
                                   out.header.length, scanned, out.tail.data ? out.tail.data : "",
                                   out.tail.length, out.truncated ? Py_True : Py_False);
        }
    }
    source_close(&src);
    free(out.header.data);
    free(out.tail.data);
    columns_free(&s.columns);
    interner_free(&s.cats);
    interner_free(&s.names);
    interner_free(&s.extras);
    free(s.scratch.data);
    if (hurry.obj != NULL) PyBuffer_Release(&hurry);
    return result;
}

#if defined(__GLIBC__)
#include <malloc.h>
#endif

/* glibc's mallopt(param, value), for the console script (gpuscope.console._tune_malloc): this
 * module loads before the trace's scan starts, ctypes (~2 ms to import) after. False where the
 * C library has no mallopt or refuses the value. */
static PyObject *set_malloc_option(PyObject *self, PyObject *args) {
    int param, value;
    (void)self;
    if (!PyArg_ParseTuple(args, "ii", &param, &value)) return NULL;
#if defined(__GLIBC__)
    return PyBool_FromLong(mallopt(param, value) == 1);
#else
    (void)param;
    (void)value;
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef METHODS[] = {
    {"mallopt", set_malloc_option, METH_VARARGS,
     "glibc's mallopt(param, value): whether it took the value (False without glibc)."},
    {"scan_file", scan_file, METH_VARARGS,
     "Scan a Kineto file's events into columns (see the module source)."},
    {"use_zlib_ng", use_zlib_ng, METH_VARARGS,
     "Inflate with the zlib-ng in the given shared library, if it has it."},
    {NULL, NULL, 0, NULL},
};

/* Raised whenever what the scanner returns changes (a column, an args key it keeps): the Python
 * side does not use a build of older source (gpuscope.readers._scan.SCANNER_VERSION). */
#define KSCAN_VERSION 10

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_kscan", "Kineto events straight into columns.", -1, METHODS,
};

PyMODINIT_FUNC PyInit__kscan(void) {
    keys_ready(&ARG_SET);
    keys_ready(&EVENT_SET);
    if (PyType_Ready(&BlockType) < 0) return NULL;
    PyObject *module = PyModule_Create(&MODULE);
    if (module == NULL) return NULL;
    GzipError = PyErr_NewException("gpuscope.readers._kscan.GzipError", NULL, NULL);
    LimitError = PyErr_NewException("gpuscope.readers._kscan.LimitError", NULL, NULL);
    if (GzipError == NULL || PyModule_AddObjectRef(module, "GzipError", GzipError) < 0 ||
        LimitError == NULL || PyModule_AddObjectRef(module, "LimitError", LimitError) < 0 ||
        PyModule_AddIntConstant(module, "VERSION", KSCAN_VERSION) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
