/* txmq._codec_c: the commit-log record helpers verify, patch and fields in C.
 *
 * The reference is txmq/_codec_py.py: same arguments, same results, same exception
 * classes and messages (ValueError; UnicodeDecodeError for undecodable text; TypeError
 * for arguments of the wrong type). The record layout is documented in txmq/records.py;
 * all integers are big-endian. Use the functions through txmq.codec_native.
 *
 * Bounds: every read and write is checked against the buffer's length first; sizes and
 * positions are compared as 64-bit unsigned quantities relative to the record start, so
 * a hostile u32 (size, body length) cannot overflow an index.
 *
 * CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320: zlib.crc32) is computed here,
 * slicing-by-16 (as fast as zlib's here), so the module needs no zlib headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define MESSAGE_MAGIC 0x54584D51u
#define HEADER_SIZE 116u
#define RECORD_CRC_START 12u
#define MIN_VERIFIED_SIZE (HEADER_SIZE + 1u + 1u + 2u)
#define MIN_DECODED_SIZE (HEADER_SIZE + 3u)
#define HOST_SIZE 20

/* -- CRC-32 ------------------------------------------------------------------------ */

static uint32_t crc_table[16][256];

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        }
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 16; t++) {
            uint32_t prev = crc_table[t - 1][i];
            crc_table[t][i] = (prev >> 8) ^ crc_table[0][prev & 0xFFu];
        }
    }
}

static inline uint32_t
rd_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#define CRC_WORD(t, w) \
    (crc_table[(t) + 3][(w) & 0xFFu] ^ crc_table[(t) + 2][((w) >> 8) & 0xFFu] \
     ^ crc_table[(t) + 1][((w) >> 16) & 0xFFu] ^ crc_table[(t)][(w) >> 24])

static uint32_t
crc32_ieee(const unsigned char *p, size_t n)
{
    uint32_t crc = 0xFFFFFFFFu;
    while (n >= 16) {
        uint32_t a = crc ^ rd_le32(p), b = rd_le32(p + 4), c = rd_le32(p + 8), d = rd_le32(p + 12);
        crc = CRC_WORD(12, a) ^ CRC_WORD(8, b) ^ CRC_WORD(4, c) ^ CRC_WORD(0, d);
        p += 16;
        n -= 16;
    }
    while (n--) {
        crc = crc_table[0][(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
    }
    return crc ^ 0xFFFFFFFFu;
}

/* -- big-endian integers ------------------------------------------------------------ */

static inline uint32_t
rd_u16(const unsigned char *p)
{
    return (uint32_t)p[0] << 8 | (uint32_t)p[1];
}

static inline uint32_t
rd_u32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline int32_t
rd_i32(const unsigned char *p)
{
    return (int32_t)rd_u32(p);
}

static inline int64_t
rd_i64(const unsigned char *p)
{
    return (int64_t)((uint64_t)rd_u32(p) << 32 | (uint64_t)rd_u32(p + 4));
}

static inline void
wr_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void
wr_i64(unsigned char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    wr_u32(p, (uint32_t)(u >> 32));
    wr_u32(p + 4, (uint32_t)u);
}

/* -- arguments ---------------------------------------------------------------------- */

/* A bytes-like argument (writable if asked): the Python version's memoryview() checks,
 * in the same order and with the same TypeError messages. Returns 0, or -1 with an
 * exception set. */
static int
get_buffer(PyObject *obj, Py_buffer *view, int writable)
{
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError, "memoryview: a bytes-like object is required, not '%.200s'",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_FULL_RO) < 0) {
        return -1;
    }
    if (writable && view->readonly) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "a writable bytes-like object is required, not '%.200s'",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (!PyBuffer_IsContiguous(view, 'C')) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "a C-contiguous bytes-like object is required");
        return -1;
    }
    return 0;
}

/* An integer argument: ``*obj`` gets a new reference to it as an exact int (for
 * messages), ``*value`` its value and ``*fits`` whether it is in the signed 64-bit range
 * (``*value`` is then meaningful). Returns 0, or -1 with TypeError set. */
static int
get_int(PyObject *arg, PyObject **obj, long long *value, int *fits)
{
    int overflow = 0;
    *obj = PyNumber_Index(arg);
    if (*obj == NULL) {
        return -1;
    }
    *value = PyLong_AsLongLongAndOverflow(*obj, &overflow);
    if (*value == -1 && PyErr_Occurred()) {
        Py_CLEAR(*obj);
        return -1;
    }
    *fits = overflow == 0;
    if (overflow) {
        *value = overflow > 0 ? LLONG_MAX : LLONG_MIN;
    }
    return 0;
}

/* A position (>= 0): ValueError for a negative one. ``*huge`` is set for a position
 * beyond any buffer (larger than PY_SSIZE_T_MAX). Returns 0 or -1. */
static int
check_pos(PyObject *pos_obj, long long pos, int fits, Py_ssize_t *out, int *huge)
{
    if (pos < 0) {
        PyErr_Format(PyExc_ValueError, "negative position %S", pos_obj);
        return -1;
    }
    *huge = !fits || (unsigned long long)pos > (unsigned long long)PY_SSIZE_T_MAX;
    *out = *huge ? 0 : (Py_ssize_t)pos;
    return 0;
}

/* len - pos as a Python int, for a message about a huge position (new reference). */
static PyObject *
avail_obj(Py_ssize_t len, PyObject *pos_obj)
{
    PyObject *len_obj = PyLong_FromSsize_t(len);
    if (len_obj == NULL) {
        return NULL;
    }
    PyObject *avail = PyNumber_Subtract(len_obj, pos_obj);
    Py_DECREF(len_obj);
    return avail;
}

/* ValueError "<len - pos> bytes at <pos>: not a whole record header" for a huge pos. */
static void
raise_huge_header(Py_ssize_t len, PyObject *pos_obj, const char *fmt, PyObject *second)
{
    PyObject *avail = avail_obj(len, pos_obj);
    if (avail != NULL) {
        PyErr_Format(PyExc_ValueError, fmt, avail, second);
        Py_DECREF(avail);
    }
}

/* -- verify ------------------------------------------------------------------------- */

/* The checks of verify on the record at p (avail >= 0 bytes there) that must sit at
 * physical offset po (po_obj: the same as an int, for the messages; po_fits: whether it
 * is in the signed 64-bit range). Returns its size, or 0 with ValueError set. */
static uint32_t
check_record(const unsigned char *p, Py_ssize_t avail, PyObject *po_obj, long long po, int po_fits)
{
    if (avail < (Py_ssize_t)RECORD_CRC_START) {
        PyErr_Format(PyExc_ValueError, "%zd bytes left at %S, no record header", avail, po_obj);
        return 0;
    }
    uint32_t size = rd_u32(p), magic = rd_u32(p + 4), crc = rd_u32(p + 8);
    if (magic != MESSAGE_MAGIC) {
        PyErr_Format(PyExc_ValueError, "bad magic 0x%x at %S", (unsigned int)magic, po_obj);
        return 0;
    }
    if (size < MIN_VERIFIED_SIZE || (uint64_t)size > (uint64_t)avail) {
        PyErr_Format(PyExc_ValueError, "impossible size %u at %S (%zd bytes left)", (unsigned int)size, po_obj,
                     avail);
        return 0;
    }
    /* From here on size <= avail: p[0 .. size) is inside the buffer. */
    if (crc32_ieee(p + RECORD_CRC_START, size - RECORD_CRC_START) != crc) {
        PyErr_Format(PyExc_ValueError, "record CRC mismatch at %S", po_obj);
        return 0;
    }
    int64_t phys = rd_i64(p + 32);
    if (!po_fits || phys != (int64_t)po) {
        PyErr_Format(PyExc_ValueError, "record at %S claims offset %lld", po_obj, (long long)phys);
        return 0;
    }
    uint32_t body_len = rd_u32(p + HEADER_SIZE - 4);
    uint64_t t = (uint64_t)HEADER_SIZE + body_len; /* topic length byte, relative to p */
    if (t + 3 > size) {
        PyErr_Format(PyExc_ValueError, "body length %u overruns record at %S", (unsigned int)body_len, po_obj);
        return 0;
    }
    uint64_t pp = t + 1 + p[t]; /* properties length, relative to p; t < size */
    if (pp + 2 > size || pp + 2 + rd_u16(p + pp) != size) {
        PyErr_Format(PyExc_ValueError, "field lengths disagree with size %u at %S", (unsigned int)size, po_obj);
        return 0;
    }
    return size;
}

PyDoc_STRVAR(verify_doc,
"verify(buf, pos, physical_offset, /) -> int\n\n"
"Validate the record at buf[pos:] that must sit at physical_offset; returns its size.\n"
"The checks, order and messages of txmq_store.codec.verify_record, as ValueError.");

static PyObject *
codec_verify(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    PyObject *pos_obj = NULL, *po_obj = NULL, *result = NULL;
    long long pos_v, po;
    int pos_fits, po_fits, huge;
    Py_ssize_t pos;

    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "verify() takes exactly 3 positional arguments (%zd given)", nargs);
        return NULL;
    }
    if (get_buffer(args[0], &view, 0) < 0) {
        return NULL;
    }
    if (get_int(args[1], &pos_obj, &pos_v, &pos_fits) < 0 || get_int(args[2], &po_obj, &po, &po_fits) < 0) {
        goto done;
    }
    if (check_pos(pos_obj, pos_v, pos_fits, &pos, &huge) < 0) {
        goto done;
    }
    if (huge) {
        raise_huge_header(view.len, pos_obj, "%S bytes left at %S, no record header", po_obj);
        goto done;
    }
    Py_ssize_t avail = view.len - pos; /* both >= 0: no overflow */
    uint32_t size = check_record((const unsigned char *)view.buf + pos, avail, po_obj, po, po_fits);
    if (size == 0) {
        goto done;
    }
    result = PyLong_FromUnsignedLong(size);
done:
    Py_XDECREF(pos_obj);
    Py_XDECREF(po_obj);
    PyBuffer_Release(&view);
    return result;
}

/* -- patch -------------------------------------------------------------------------- */

PyDoc_STRVAR(patch_doc,
"patch(frame, pos, queue_offset, physical_offset, born_host, store_timestamp_ms, store_host, /)\n\n"
"Write the fields only the store knows into the record at frame[pos:] in place, then\n"
"its record CRC. ValueError (nothing written) for a negative pos, a host not of 20\n"
"bytes, an integer outside the signed 64-bit range, or a record not inside the frame.");

static PyObject *
codec_patch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *const names[3] = {"queue_offset", "physical_offset", "store_timestamp_ms"};
    Py_buffer frame, born, store;
    int have_frame = 0, have_born = 0, have_store = 0;
    PyObject *pos_obj = NULL, *int_obj[3] = {NULL, NULL, NULL}, *result = NULL;
    long long pos_v, ints[3];
    int pos_fits, fits[3], huge;
    Py_ssize_t pos;
    unsigned char born_copy[HOST_SIZE], store_copy[HOST_SIZE];

    (void)module;
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "patch() takes exactly 7 positional arguments (%zd given)", nargs);
        return NULL;
    }
    /* Conversions in argument order (TypeError), then the value checks (ValueError). */
    if (get_buffer(args[0], &frame, 1) < 0) {
        goto done;
    }
    have_frame = 1;
    if (get_int(args[1], &pos_obj, &pos_v, &pos_fits) < 0 || get_int(args[2], &int_obj[0], &ints[0], &fits[0]) < 0
        || get_int(args[3], &int_obj[1], &ints[1], &fits[1]) < 0) {
        goto done;
    }
    if (get_buffer(args[4], &born, 0) < 0) {
        goto done;
    }
    have_born = 1;
    if (get_int(args[5], &int_obj[2], &ints[2], &fits[2]) < 0) {
        goto done;
    }
    if (get_buffer(args[6], &store, 0) < 0) {
        goto done;
    }
    have_store = 1;

    if (check_pos(pos_obj, pos_v, pos_fits, &pos, &huge) < 0) {
        goto done;
    }
    if (born.len != HOST_SIZE) {
        PyErr_Format(PyExc_ValueError, "born_host is %zd bytes, not %d", born.len, HOST_SIZE);
        goto done;
    }
    if (store.len != HOST_SIZE) {
        PyErr_Format(PyExc_ValueError, "store_host is %zd bytes, not %d", store.len, HOST_SIZE);
        goto done;
    }
    for (int i = 0; i < 3; i++) {
        if (!fits[i]) {
            PyErr_Format(PyExc_ValueError, "%s %S does not fit a signed 64-bit integer", names[i], int_obj[i]);
            goto done;
        }
    }
    if (huge) {
        raise_huge_header(frame.len, pos_obj, "%S bytes at %S: not a whole record header", pos_obj);
        goto done;
    }
    Py_ssize_t avail = frame.len - pos;
    if (avail < (Py_ssize_t)HEADER_SIZE) {
        PyErr_Format(PyExc_ValueError, "%zd bytes at %zd: not a whole record header", avail, pos);
        goto done;
    }
    unsigned char *p = (unsigned char *)frame.buf + pos;
    uint32_t size = rd_u32(p);
    if (size < HEADER_SIZE || (uint64_t)size > (uint64_t)avail) {
        PyErr_Format(PyExc_ValueError, "impossible record size %u at %zd (%zd bytes left in the frame)",
                     (unsigned int)size, pos, avail);
        goto done;
    }
    /* The hosts may be views of the frame itself: copy them before writing. */
    memcpy(born_copy, born.buf, HOST_SIZE);
    memcpy(store_copy, store.buf, HOST_SIZE);
    wr_i64(p + 24, (int64_t)ints[0]);
    wr_i64(p + 32, (int64_t)ints[1]);
    memcpy(p + 52, born_copy, HOST_SIZE);
    wr_i64(p + 72, (int64_t)ints[2]);
    memcpy(p + 80, store_copy, HOST_SIZE);
    wr_u32(p + 8, crc32_ieee(p + RECORD_CRC_START, size - RECORD_CRC_START));
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(pos_obj);
    for (int i = 0; i < 3; i++) {
        Py_XDECREF(int_obj[i]);
    }
    if (have_store) {
        PyBuffer_Release(&store);
    }
    if (have_born) {
        PyBuffer_Release(&born);
    }
    if (have_frame) {
        PyBuffer_Release(&frame);
    }
    return result;
}

/* -- fields ------------------------------------------------------------------------- */

PyDoc_STRVAR(fields_doc,
"fields(buf, pos, /) -> tuple\n\n"
"The record at buf[pos:] decoded, its CRC not checked: (size, body_crc, queue_id, flag,\n"
"queue_offset, physical_offset, sys_flag, born_timestamp_ms, born_host_raw20,\n"
"store_timestamp_ms, store_host_raw20, reconsume_times, prepared_transaction_offset,\n"
"body, topic, properties_text). ValueError for bytes that are not a whole record,\n"
"UnicodeDecodeError for a topic not ASCII or properties not UTF-8.");

static PyObject *
codec_fields(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    PyObject *pos_obj = NULL, *result = NULL;
    PyObject *items[16] = {NULL};
    long long pos_v;
    int pos_fits, huge;
    Py_ssize_t pos;

    (void)module;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "fields() takes exactly 2 positional arguments (%zd given)", nargs);
        return NULL;
    }
    if (get_buffer(args[0], &view, 0) < 0) {
        return NULL;
    }
    if (get_int(args[1], &pos_obj, &pos_v, &pos_fits) < 0) {
        goto done;
    }
    if (check_pos(pos_obj, pos_v, pos_fits, &pos, &huge) < 0) {
        goto done;
    }
    if (huge) {
        raise_huge_header(view.len, pos_obj, "%S bytes at %S: not a whole record header", pos_obj);
        goto done;
    }
    Py_ssize_t avail = view.len - pos;
    if (avail < (Py_ssize_t)HEADER_SIZE) {
        PyErr_Format(PyExc_ValueError, "%zd bytes at %zd: not a whole record header", avail, pos);
        goto done;
    }
    const unsigned char *p = (const unsigned char *)view.buf + pos;
    uint32_t size = rd_u32(p), magic = rd_u32(p + 4);
    if (magic != MESSAGE_MAGIC || size < MIN_DECODED_SIZE || (uint64_t)size > (uint64_t)avail) {
        PyErr_Format(PyExc_ValueError, "no whole record at %zd (magic 0x%x, size %u)", pos, (unsigned int)magic,
                     (unsigned int)size);
        goto done;
    }
    /* From here on p[0 .. size) is inside the buffer. */
    uint32_t body_len = rd_u32(p + HEADER_SIZE - 4);
    uint64_t t = (uint64_t)HEADER_SIZE + body_len;
    if (t + 3 > size) {
        PyErr_Format(PyExc_ValueError, "body length %u overruns the record at %zd", (unsigned int)body_len, pos);
        goto done;
    }
    unsigned int topic_len = p[t];
    uint64_t pp = t + 1 + topic_len;
    if (pp + 2 > size) {
        PyErr_Format(PyExc_ValueError, "topic length %u overruns the record at %zd", topic_len, pos);
        goto done;
    }
    uint32_t props_len = rd_u16(p + pp);
    if (pp + 2 + props_len != size) {
        PyErr_Format(PyExc_ValueError, "properties length %u disagrees with the record size %u at %zd",
                     (unsigned int)props_len, (unsigned int)size, pos);
        goto done;
    }
    /* In the Python version's order: topic, properties, body. */
    items[14] = PyUnicode_DecodeASCII((const char *)p + t + 1, (Py_ssize_t)topic_len, NULL);
    if (items[14] == NULL) {
        goto done;
    }
    items[15] = PyUnicode_DecodeUTF8((const char *)p + pp + 2, (Py_ssize_t)props_len, NULL);
    if (items[15] == NULL) {
        goto done;
    }
    items[13] = PyBytes_FromStringAndSize((const char *)p + HEADER_SIZE, (Py_ssize_t)body_len);
    items[0] = PyLong_FromUnsignedLong(size);
    items[1] = PyLong_FromUnsignedLong(rd_u32(p + 12));
    items[2] = PyLong_FromUnsignedLong(rd_u32(p + 16));
    items[3] = PyLong_FromLong(rd_i32(p + 20));
    items[4] = PyLong_FromLongLong(rd_i64(p + 24));
    items[5] = PyLong_FromLongLong(rd_i64(p + 32));
    items[6] = PyLong_FromUnsignedLong(rd_u32(p + 40));
    items[7] = PyLong_FromLongLong(rd_i64(p + 44));
    items[8] = PyBytes_FromStringAndSize((const char *)p + 52, HOST_SIZE);
    items[9] = PyLong_FromLongLong(rd_i64(p + 72));
    items[10] = PyBytes_FromStringAndSize((const char *)p + 80, HOST_SIZE);
    items[11] = PyLong_FromUnsignedLong(rd_u32(p + 100));
    items[12] = PyLong_FromLongLong(rd_i64(p + 104));
    for (int i = 0; i < 16; i++) {
        if (items[i] == NULL) {
            goto done;
        }
    }
    result = PyTuple_New(16);
    if (result == NULL) {
        goto done;
    }
    for (int i = 0; i < 16; i++) {
        PyTuple_SET_ITEM(result, i, items[i]); /* steals */
        items[i] = NULL;
    }
done:
    for (int i = 0; i < 16; i++) {
        Py_XDECREF(items[i]);
    }
    Py_XDECREF(pos_obj);
    PyBuffer_Release(&view);
    return result;
}

/* -- walk -------------------------------------------------------------------------- */

#define BLANK_MAGIC 0x54584D42u
#define BLANK_SIZE 8

/* A substring of the UTF-8 text at s (already validated as a whole: the split points
 * are ASCII, so every piece is valid too). */
static PyObject *
utf8_piece(const unsigned char *s, Py_ssize_t n)
{
    return PyUnicode_DecodeUTF8((const char *)s, n, NULL);
}

/* The values of TAGS, KEYS and UNIQ_KEY in the properties text (name \x01 value \x02,
 * repeated; the last of a name wins, as in a dict), "" when absent: out[0..3) get new
 * references. Returns 0, or -1 with an exception set (out[] then holds nothing). */
static int
field_properties(const unsigned char *s, Py_ssize_t n, PyObject **out)
{
    const unsigned char *found[3] = {NULL, NULL, NULL};
    Py_ssize_t found_len[3] = {0, 0, 0};
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t start = i;
        while (i < n && s[i] != 0x02) {
            i++;
        }
        Py_ssize_t item_end = i++; /* past the separator */
        if (item_end == start) {
            continue; /* an empty item */
        }
        Py_ssize_t sep = start;
        while (sep < item_end && s[sep] != 0x01) {
            sep++;
        }
        Py_ssize_t name_len = sep - start; /* no separator: the value is "" */
        int which = -1;
        if (name_len == 4 && memcmp(s + start, "TAGS", 4) == 0) {
            which = 0;
        } else if (name_len == 4 && memcmp(s + start, "KEYS", 4) == 0) {
            which = 1;
        } else if (name_len == 8 && memcmp(s + start, "UNIQ_KEY", 8) == 0) {
            which = 2;
        }
        if (which >= 0) {
            found[which] = s + sep;
            found_len[which] = sep < item_end ? item_end - sep - 1 : 0;
            if (sep < item_end) {
                found[which]++;
            }
        }
    }
    for (int k = 0; k < 3; k++) {
        out[k] = found[k] != NULL ? utf8_piece(found[k], found_len[k]) : PyUnicode_New(0, 0);
        if (out[k] == NULL) {
            for (int j = 0; j < k; j++) {
                Py_CLEAR(out[j]);
            }
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(walk_doc,
"walk(buf, offset, segment_end, /) -> list\n\n"
"Check a shipment of copied log bytes read at offset (not past its segment, which ends at\n"
"segment_end) in one pass: whole records, each passing verify at its own offset, and at\n"
"most a blank marker closing the segment. Per record: (physical_offset, size, queue_id,\n"
"queue_offset, sys_flag, store_timestamp_ms, topic, properties_text, tags, keys_text,\n"
"unique_id). ValueError for the first fault (nothing is returned then).");

static PyObject *
codec_walk(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    PyObject *off_obj = NULL, *end_obj = NULL, *out = NULL, *topic = NULL;
    long long offset, segment_end;
    int off_fits, end_fits;
    const unsigned char *topic_raw = NULL;
    unsigned int topic_raw_len = 0;

    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "walk() takes exactly 3 positional arguments (%zd given)", nargs);
        return NULL;
    }
    if (get_buffer(args[0], &view, 0) < 0) {
        return NULL;
    }
    if (get_int(args[1], &off_obj, &offset, &off_fits) < 0 || get_int(args[2], &end_obj, &segment_end, &end_fits) < 0) {
        goto fail;
    }
    if (!off_fits || !end_fits || offset > (long long)1 << 62 || offset < -((long long)1 << 62)) {
        PyErr_Format(PyExc_ValueError, "offsets %S, %S out of range", off_obj, end_obj);
        goto fail;
    }
    out = PyList_New(0);
    if (out == NULL) {
        goto fail;
    }
    const unsigned char *base = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len, at = 0;
    while (at < n) {
        long long here = offset + (long long)at;
        if (n - at < BLANK_SIZE) {
            PyErr_Format(PyExc_ValueError, "shipment at %lld ends inside a record header", offset);
            goto fail;
        }
        const unsigned char *p = base + at;
        uint32_t size = rd_u32(p);
        if (rd_u32(p + 4) == BLANK_MAGIC) {
            if (here + (long long)size != segment_end || (uint64_t)size != (uint64_t)(n - at)) {
                PyErr_Format(PyExc_ValueError, "blank marker at %lld does not close its segment", here);
                goto fail;
            }
            break;
        }
        PyObject *here_obj = PyLong_FromLongLong(here);
        if (here_obj == NULL) {
            goto fail;
        }
        size = check_record(p, n - at, here_obj, here, 1);
        if (size == 0) {
            Py_DECREF(here_obj);
            goto fail;
        }
        uint64_t t = (uint64_t)HEADER_SIZE + rd_u32(p + HEADER_SIZE - 4);
        unsigned int topic_len = p[t];
        uint64_t pp = t + 1 + topic_len;
        Py_ssize_t props_len = (Py_ssize_t)rd_u16(p + pp);
        /* Consecutive records of one topic share its str. */
        if (topic == NULL || topic_len != topic_raw_len || memcmp(topic_raw, p + t + 1, topic_len) != 0) {
            Py_XDECREF(topic);
            topic = PyUnicode_DecodeASCII((const char *)p + t + 1, (Py_ssize_t)topic_len, NULL);
            if (topic == NULL) {
                Py_DECREF(here_obj);
                goto fail;
            }
            topic_raw = p + t + 1;
            topic_raw_len = topic_len;
        }
        PyObject *props = utf8_piece(p + pp + 2, props_len);
        PyObject *fieldprops[3] = {NULL, NULL, NULL};
        if (props == NULL || field_properties(p + pp + 2, props_len, fieldprops) < 0) {
            Py_DECREF(here_obj);
            Py_XDECREF(props);
            goto fail;
        }
        PyObject *item = Py_BuildValue(
            "(NkkLkLONNNN)", here_obj, (unsigned long)size, (unsigned long)rd_u32(p + 16), (long long)rd_i64(p + 24),
            (unsigned long)rd_u32(p + 40), (long long)rd_i64(p + 72), topic, props, fieldprops[0], fieldprops[1],
            fieldprops[2]);
        if (item == NULL) {
            goto fail; /* Py_BuildValue released the N arguments */
        }
        int appended = PyList_Append(out, item);
        Py_DECREF(item);
        if (appended < 0) {
            goto fail;
        }
        at += (Py_ssize_t)size;
    }
    Py_XDECREF(topic);
    Py_DECREF(off_obj);
    Py_DECREF(end_obj);
    PyBuffer_Release(&view);
    return out;
fail:
    Py_XDECREF(topic);
    Py_XDECREF(out);
    Py_XDECREF(off_obj);
    Py_XDECREF(end_obj);
    PyBuffer_Release(&view);
    return NULL;
}

/* -- module ------------------------------------------------------------------------- */

static PyMethodDef codec_methods[] = {
    {"verify", (PyCFunction)(void (*)(void))codec_verify, METH_FASTCALL, verify_doc},
    {"patch", (PyCFunction)(void (*)(void))codec_patch, METH_FASTCALL, patch_doc},
    {"fields", (PyCFunction)(void (*)(void))codec_fields, METH_FASTCALL, fields_doc},
    {"walk", (PyCFunction)(void (*)(void))codec_walk, METH_FASTCALL, walk_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef codec_module = {
    PyModuleDef_HEAD_INIT,
    "txmq._codec_c",
    "The commit-log record helpers verify, patch and fields, compiled: the same behaviour\n"
    "as txmq._codec_py (use them through txmq.codec_native).",
    0,
    codec_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__codec_c(void)
{
    crc_init();
    return PyModule_Create(&codec_module);
}
