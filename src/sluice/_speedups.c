/* sluice._speedups: the per-message codecs in C.
 *
 * Each function has a pure-Python twin, which stays the reference (sluice.common.speedups picks one; the
 * environment variable SLUICE_NO_EXTENSIONS=1 forces Python). Both accept and refuse the same inputs and give
 * the same results: tests/unit/test_speedups.py checks it with hypothesis and fuzz/ checks it on every input.
 * Every read is bounds-checked against the buffer: these functions decode bytes from the network and disk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* == configuration, set once by sluice.common.speedups ========================================== */

static PyObject *format_error;        /* sluice.common.errors.MessageFormatError */
static PyTypeObject *message_ext;     /* sluice.common.message.MessageExt */
static PyObject *host_text;           /* callable: 8 raw bytes (IPv4 address, port) -> "a.b.c.d:port" */
/* (format_error by configure(), the other two by message_type()) */

/* MessageExt's slots, in the order of its __init__ arguments. */
enum {
    S_TOPIC, S_BODY, S_QUEUE_ID, S_FLAG, S_QUEUE_OFFSET, S_COMMIT_LOG_OFFSET, S_SYS_FLAG, S_BORN_TIMESTAMP,
    S_BORN_HOST, S_STORE_TIMESTAMP, S_STORE_HOST, S_RECONSUME_TIMES, S_PREPARED_TRANSACTION_OFFSET,
    S_PROPERTIES, S_RAW_PROPERTIES, S_STORE_SIZE, S_BODY_CRC, N_SLOTS
};
static const char *slot_names[N_SLOTS] = {
    "topic", "body", "queue_id", "flag", "queue_offset", "commit_log_offset", "sys_flag", "born_timestamp",
    "born_host", "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset",
    "_properties", "_raw_properties", "store_size", "body_crc",
};
static Py_ssize_t slot_offsets[N_SLOTS];

static PyObject *
configure(PyObject *self, PyObject *error)
{
    if (!PyType_Check(error) || !PyType_IsSubtype((PyTypeObject *)error, (PyTypeObject *)PyExc_Exception)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes the exception class the decoders raise");
        return NULL;
    }
    Py_XSETREF(format_error, Py_NewRef(error));
    Py_RETURN_NONE;
}

static PyObject *
message_type(PyObject *self, PyObject *args)
{
    PyObject *ext, *host;
    if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &ext, &host))
        return NULL;
    PyTypeObject *type = (PyTypeObject *)ext;
    /* Instances are filled slot by slot: the class must hold these slots and nothing that __init__ would
     * set besides (else the caller keeps the Python decoder). */
    PyObject *slots = PyObject_GetAttrString(ext, "__slots__");
    if (slots == NULL)
        return NULL;
    Py_ssize_t n = PyObject_Length(slots);
    Py_DECREF(slots);
    if (n < 0)
        return NULL;
    if (n != N_SLOTS || type->tp_dictoffset != 0) {
        PyErr_Format(PyExc_TypeError, "%s has %zd slots (or a __dict__), not the %d known", type->tp_name, n,
                     N_SLOTS);
        return NULL;
    }
    Py_ssize_t offsets[N_SLOTS];
    for (int i = 0; i < N_SLOTS; i++) {
        PyObject *descr = PyObject_GetAttrString(ext, slot_names[i]);
        if (descr == NULL)
            return NULL;
        int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type)
                 && ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
        if (ok)
            offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name, slot_names[i]);
            return NULL;
        }
    }
    memcpy(slot_offsets, offsets, sizeof(offsets));
    Py_XSETREF(message_ext, (PyTypeObject *)Py_NewRef(ext));
    Py_XSETREF(host_text, Py_NewRef(host));
    Py_RETURN_NONE;
}

static int
configured(void)
{
    if (format_error == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sluice._speedups.configure() was not called");
        return 0;
    }
    return 1;
}

static void *
bad(const char *fmt, ...)
{
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (msg != NULL) {
        PyErr_SetObject(format_error, msg);
        Py_DECREF(msg);
    }
    return NULL;
}

/* == big-endian reads ============================================================================ */

static inline int32_t
get_i32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static inline int16_t
get_i16(const unsigned char *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

static inline int64_t
get_i64(const unsigned char *p)
{
    return (int64_t)(((uint64_t)(uint32_t)get_i32(p) << 32) | (uint64_t)(uint32_t)get_i32(p + 4));
}

static inline void
put_i32(unsigned char *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24);
    p[1] = (unsigned char)(u >> 16);
    p[2] = (unsigned char)(u >> 8);
    p[3] = (unsigned char)u;
}

static inline void
put_i64(unsigned char *p, int64_t v)
{
    put_i32(p, (int32_t)((uint64_t)v >> 32));
    put_i32(p + 4, (int32_t)(uint64_t)v);
}

/* == CRC32 (IEEE, zlib's), slicing by 8 ========================================================== */

static uint32_t crc_table[8][256];

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t
crc32_of(const unsigned char *p, Py_ssize_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
        uint32_t hi = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) | ((uint32_t)p[7] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF]
            ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF]
            ^ crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* == records (the stored / pulled v1 layout) ===================================================== */

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define BLANK_MAGIC ((int32_t)0xCBD43194)
#define RECORD_FIXED 91
#define POS_BODY_CRC 8
#define POS_BODY_LENGTH 84
#define POS_BODY 88
#define HEADER_SIZE 88

/* The text of an 8-byte host field; *last / last_raw remember the previous one (a pull has one or two). */
static PyObject *
host_of(const unsigned char *raw, PyObject *hosts, unsigned char *last_raw, PyObject **last)
{
    if (*last != NULL && memcmp(raw, last_raw, 8) == 0)
        return Py_NewRef(*last);
    PyObject *key = PyBytes_FromStringAndSize((const char *)raw, 8);
    if (key == NULL)
        return NULL;
    PyObject *text = PyDict_GetItemWithError(hosts, key);
    if (text != NULL) {
        Py_INCREF(text);
    } else if (!PyErr_Occurred()) {
        text = PyObject_CallOneArg(host_text, key);
    }
    Py_DECREF(key);
    if (text == NULL)
        return NULL;
    memcpy(last_raw, raw, 8);
    Py_XSETREF(*last, Py_NewRef(text));
    return text;
}

static PyObject *
new_message(PyObject **fields)
{
    PyObject *m = message_ext->tp_alloc(message_ext, 0);
    if (m == NULL) {
        for (int i = 0; i < N_SLOTS; i++)
            Py_DECREF(fields[i]);
        return NULL;
    }
    for (int i = 0; i < N_SLOTS; i++)
        *(PyObject **)((char *)m + slot_offsets[i]) = fields[i];  /* steals */
    return m;
}

static PyObject *
decode_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *hosts;
    if (!configured() || !PyArg_ParseTuple(args, "y*O!", &view, &PyDict_Type, &hosts))
        return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t n = view.len, pos = 0;
    if (message_ext == NULL) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "sluice._speedups.message_type() was not called");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    PyObject *topic = NULL, *born = NULL, *store = NULL;
    const unsigned char *topic_raw = NULL;
    Py_ssize_t topic_raw_len = -1;
    unsigned char born_raw[8], store_raw[8];
    if (out == NULL)
        goto fail;
    while (pos < n) {
        if (pos + 8 > n) {
            bad("trailing bytes after the last record");
            goto fail;
        }
        if (pos + HEADER_SIZE > n) {
            bad("cannot decode record at %zd: %zd bytes left, a record header needs %d", pos, n - pos, HEADER_SIZE);
            goto fail;
        }
        const unsigned char *r = buf + pos;
        int32_t total = get_i32(r), magic = get_i32(r + 4), body_len = get_i32(r + POS_BODY_LENGTH);
        if (magic != MAGIC_V1) {
            bad("bad magic code 0x%x at %zd", (unsigned int)magic, pos);
            goto fail;
        }
        if (total < RECORD_FIXED || body_len < 0 || total > n - pos) {
            bad("record at %zd: total size %d, body length %d do not fit", pos, (int)total, (int)body_len);
            goto fail;
        }
        /* Every length is checked against the record's own size before anything is read past the body. */
        if ((int64_t)RECORD_FIXED + body_len > total) {
            bad("field lengths of the record at %zd do not add up to its size", pos);
            goto fail;
        }
        const unsigned char *t = r + POS_BODY + body_len;
        int topic_len = t[0];
        if ((int64_t)RECORD_FIXED + body_len + topic_len > total) {
            bad("field lengths of the record at %zd do not add up to its size", pos);
            goto fail;
        }
        int16_t props_len = get_i16(t + 1 + topic_len);
        if (props_len < 0 || (int64_t)RECORD_FIXED + body_len + topic_len + props_len != total) {
            bad("field lengths of the record at %zd do not add up to its size", pos);
            goto fail;
        }
        if (topic_raw == NULL || topic_len != topic_raw_len || memcmp(topic_raw, t + 1, topic_len) != 0) {
            PyObject *name = PyUnicode_DecodeUTF8((const char *)t + 1, topic_len, "strict");
            if (name == NULL) {
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyErr_NormalizeException(&type, &value, &tb);
                bad("cannot decode record at %zd: %S", pos, value ? value : Py_None);
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
                goto fail;
            }
            Py_XSETREF(topic, name);
            topic_raw = t + 1;
            topic_raw_len = topic_len;
        }
        PyObject *f[N_SLOTS];
        f[S_TOPIC] = Py_NewRef(topic);
        f[S_BODY] = PyBytes_FromStringAndSize((const char *)r + POS_BODY, body_len);
        f[S_QUEUE_ID] = PyLong_FromLong(get_i32(r + 12));
        f[S_FLAG] = PyLong_FromLong(get_i32(r + 16));
        f[S_QUEUE_OFFSET] = PyLong_FromLongLong(get_i64(r + 20));
        f[S_COMMIT_LOG_OFFSET] = PyLong_FromLongLong(get_i64(r + 28));
        f[S_SYS_FLAG] = PyLong_FromLong(get_i32(r + 36));
        f[S_BORN_TIMESTAMP] = PyLong_FromLongLong(get_i64(r + 40));
        f[S_BORN_HOST] = host_of(r + 48, hosts, born_raw, &born);
        f[S_STORE_TIMESTAMP] = PyLong_FromLongLong(get_i64(r + 56));
        f[S_STORE_HOST] = f[S_BORN_HOST] == NULL ? NULL : host_of(r + 64, hosts, store_raw, &store);
        f[S_RECONSUME_TIMES] = PyLong_FromLong(get_i32(r + 72));
        f[S_PREPARED_TRANSACTION_OFFSET] = PyLong_FromLongLong(get_i64(r + 76));
        f[S_PROPERTIES] = Py_NewRef(Py_None);
        f[S_RAW_PROPERTIES] = PyBytes_FromStringAndSize((const char *)t + 3 + topic_len, props_len);
        f[S_STORE_SIZE] = PyLong_FromLong(total);
        f[S_BODY_CRC] = PyLong_FromLong(get_i32(r + POS_BODY_CRC));
        int failed = 0;
        for (int i = 0; i < N_SLOTS; i++)
            failed |= f[i] == NULL;
        if (failed) {
            for (int i = 0; i < N_SLOTS; i++)
                Py_XDECREF(f[i]);
            goto fail;
        }
        PyObject *m = new_message(f);
        if (m == NULL)
            goto fail;
        int err = PyList_Append(out, m);
        Py_DECREF(m);
        if (err < 0)
            goto fail;
        pos += total;
    }
    Py_XDECREF(topic);
    Py_XDECREF(born);
    Py_XDECREF(store);
    PyBuffer_Release(&view);
    return out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(topic);
    Py_XDECREF(born);
    Py_XDECREF(store);
    PyBuffer_Release(&view);
    return NULL;
}

static int
topic_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '%' || c == '|'
           || c == '_' || c == '-';
}

/* check_record(buf, pos, limit, check_crc) -> size; 0 for a clean end, -1 for a BLANK filler. */
static PyObject *
check_record(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, limit;
    int check_crc = 1;
    if (!configured() || !PyArg_ParseTuple(args, "y*nn|p", &view, &pos, &limit, &check_crc))
        return NULL;
    PyObject *result = NULL;
    const unsigned char *buf = view.buf;
    if (pos < 0 || limit < pos || limit > view.len) {
        PyErr_Format(PyExc_ValueError, "position %zd / limit %zd outside a buffer of %zd bytes", pos, limit,
                     view.len);
        goto done;
    }
    if (pos + 8 > limit) {
        for (Py_ssize_t i = pos; i < limit; i++)
            if (buf[i]) {
                bad("truncated record header");
                goto done;
            }
        result = PyLong_FromLong(0);
        goto done;
    }
    const unsigned char *r = buf + pos;
    int32_t total = get_i32(r), magic = get_i32(r + 4);
    if (magic == BLANK_MAGIC) {
        if (total != limit - pos)
            bad("BLANK filler of %d bytes where %zd remain", (int)total, limit - pos);
        else
            result = PyLong_FromLong(-1);
        goto done;
    }
    if (magic != MAGIC_V1) {
        if (total == 0 && magic == 0)
            result = PyLong_FromLong(0);
        else
            bad("bad magic code 0x%x", (unsigned int)magic);
        goto done;
    }
    if (total < RECORD_FIXED || total > limit - pos) {
        bad("record size %d out of bounds", (int)total);
        goto done;
    }
    int32_t body_len = get_i32(r + POS_BODY_LENGTH);
    if (body_len < 0 || (int64_t)POS_BODY + body_len + 3 > total) {
        bad("body length %d inconsistent with record size %d", (int)body_len, (int)total);
        goto done;
    }
    int topic_len = r[POS_BODY + body_len];
    Py_ssize_t props_rel = (Py_ssize_t)POS_BODY + body_len + 1 + topic_len;
    if (props_rel + 2 > total) {
        bad("topic overruns the record");
        goto done;
    }
    int16_t props_len = get_i16(r + props_rel);
    if (props_len < 0 || (int64_t)RECORD_FIXED + body_len + topic_len + props_len != total) {
        bad("field lengths do not add up to the record size");
        goto done;
    }
    int topic_ok = topic_len > 0;
    for (int i = 0; topic_ok && i < topic_len; i++)
        topic_ok = topic_byte(r[POS_BODY + body_len + 1 + i]);
    if (!topic_ok) {
        bad("topic bytes are not a valid topic name");
        goto done;
    }
    if (props_len && memchr(r + props_rel + 2, 0, props_len) != NULL) {
        bad("NUL byte in properties");
        goto done;
    }
    if (check_crc && (int32_t)(crc32_of(r + POS_BODY, body_len) & 0x7FFFFFFF) != get_i32(r + POS_BODY_CRC)) {
        bad("body CRC mismatch");
        goto done;
    }
    result = PyLong_FromLong(total);
done:
    PyBuffer_Release(&view);
    return result;
}

/* == batch bodies (SEND_BATCH_MESSAGE) =========================================================== */

#define BATCH_HEAD 20
#define BATCH_OVERHEAD 22

/* scan_batch(body) -> (body_start, props_len_pos, end, flag): four arrays of native int64 as bytes. */
static PyObject *
scan_batch(PyObject *self, PyObject *args)
{
    Py_buffer view;
    if (!configured() || !PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t end = view.len, count = 0, pos = 0;
    PyObject *cols[4] = {NULL, NULL, NULL, NULL}, *result = NULL;
    /* First the walk from one TOTALSIZE to the next, as the Python scan makes it (same first error). */
    while (pos < end) {
        if (end - pos < BATCH_OVERHEAD) {
            bad("batch body truncated at byte %zd: %zd bytes left, a record needs at least %d", pos, end - pos,
                BATCH_OVERHEAD);
            goto done;
        }
        int32_t total = get_i32(buf + pos);
        if (total < BATCH_OVERHEAD || total > end - pos) {
            bad("batch record at byte %zd: total size %d does not fit the %zd bytes left", pos, (int)total,
                end - pos);
            goto done;
        }
        count++;
        pos += total;
    }
    for (int i = 0; i < 4; i++) {
        cols[i] = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
        if (cols[i] == NULL)
            goto done;
    }
    int64_t *body_start = (int64_t *)PyBytes_AS_STRING(cols[0]), *props_pos = (int64_t *)PyBytes_AS_STRING(cols[1]),
            *rec_end = (int64_t *)PyBytes_AS_STRING(cols[2]), *flag = (int64_t *)PyBytes_AS_STRING(cols[3]);
    pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t total = get_i32(buf + pos), body_len = get_i32(buf + pos + 16);
        if (body_len < 0 || (int64_t)BATCH_HEAD + body_len + 2 > total) {
            bad("batch record at byte %zd: body length %d overruns total size %d", pos, (int)body_len, (int)total);
            goto done;
        }
        body_start[i] = pos + BATCH_HEAD;
        props_pos[i] = pos + BATCH_HEAD + body_len;
        rec_end[i] = pos + total;
        flag[i] = get_i32(buf + pos + 12);
        pos += total;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        int16_t props_len = get_i16(buf + props_pos[i]);
        int64_t total = rec_end[i] - (body_start[i] - BATCH_HEAD), body_len = props_pos[i] - body_start[i];
        if (props_len < 0 || BATCH_OVERHEAD + body_len + props_len != total) {
            bad("batch record at byte %lld: total size %lld disagrees with body length %lld + properties length "
                "%d + %d", (long long)(body_start[i] - BATCH_HEAD), (long long)total, (long long)body_len,
                (int)props_len, BATCH_OVERHEAD);
            goto done;
        }
    }
    result = PyTuple_Pack(4, cols[0], cols[1], cols[2], cols[3]);
done:
    for (int i = 0; i < 4; i++)
        Py_XDECREF(cols[i]);
    PyBuffer_Release(&view);
    return result;
}

/* Span i of two native int64 arrays (starts, ends) into *s and *e; -1 with ValueError unless 0 <= s <= e <= limit. */
static int
span_at(const Py_buffer *starts, const Py_buffer *ends, Py_ssize_t i, Py_ssize_t limit, int64_t *s, int64_t *e)
{
    memcpy(s, (const char *)starts->buf + i * (Py_ssize_t)sizeof(int64_t), sizeof(int64_t));
    memcpy(e, (const char *)ends->buf + i * (Py_ssize_t)sizeof(int64_t), sizeof(int64_t));
    if (*s < 0 || *e < *s || *e > limit) {
        PyErr_Format(PyExc_ValueError, "span %zd [%lld, %lld) is outside %zd bytes", i, (long long)*s,
                     (long long)*e, limit);
        return -1;
    }
    return 0;
}

/* spans_hold_nul(data, starts, ends) -> whether any span data[starts[i]:ends[i]] holds a NUL byte (native int64
 * arrays); the spans are checked first. */
static PyObject *
spans_hold_nul(PyObject *self, PyObject *args)
{
    Py_buffer data, starts, ends;
    if (!PyArg_ParseTuple(args, "y*y*y*", &data, &starts, &ends))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t count = starts.len / (Py_ssize_t)sizeof(int64_t);
    if (starts.len != ends.len || starts.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "starts and ends must be int64 arrays of one length");
        goto done;
    }
    int found = 0;
    for (Py_ssize_t i = 0; i < count && !found; i++) {
        int64_t lo, hi;
        if (span_at(&starts, &ends, i, data.len, &lo, &hi) < 0)
            goto done;
        found = hi > lo && memchr((const char *)data.buf + lo, 0, (size_t)(hi - lo)) != NULL;
    }
    result = PyBool_FromLong(found);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&ends);
    return result;
}

/* index_put_many(buf, slot_num, entries_base, first_number, hashes, phys, time_diff) -> slots newly used, or -1:
 * IndexFile.put_many's entries and slots (its numpy path is the twin). Key i becomes entry first_number + i
 * (hash, commit-log offset, time_diff, the previous head of its slot's chain), then its slot's head. -1, with
 * nothing written, when a touched slot points at or past first_number (a header older than its slots, after a
 * crash: the caller repairs those chains). The columns are checked with the GIL held, written with it released. */
static PyObject *
index_put_many(PyObject *self, PyObject *args)
{
    Py_buffer buf, hashes, phys;
    Py_ssize_t slot_num, entries_base, first;
    int time_diff;
    if (!PyArg_ParseTuple(args, "w*nnny*y*i", &buf, &slot_num, &entries_base, &first, &hashes, &phys, &time_diff))
        return NULL;
    PyObject *result = NULL;
    int64_t *cols = NULL;
    Py_ssize_t k = hashes.len / (Py_ssize_t)sizeof(int64_t);
    if (hashes.len % (Py_ssize_t)sizeof(int64_t) || phys.len != hashes.len) {
        PyErr_SetString(PyExc_ValueError, "hashes and phys must be int64 arrays of one length");
        goto done;
    }
    if (slot_num <= 0 || slot_num > (buf.len - 40) / 4 || first <= 0 || first > INT32_MAX - k
            || entries_base < 40 + 4 * slot_num
            || entries_base > buf.len || (buf.len - entries_base) / 20 < first + k) {
        PyErr_SetString(PyExc_ValueError, "the slots or the entries do not fit the index file");
        goto done;
    }
    cols = PyMem_Malloc(2 * (size_t)(k ? k : 1) * sizeof(int64_t));
    if (cols == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(cols, hashes.buf, (size_t)hashes.len);
    memcpy(cols + k, phys.buf, (size_t)phys.len);
    unsigned char *b = buf.buf;
    long used = 0;
    int stale = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < k && !stale; i++) {
        int64_t slot = ((cols[i] % slot_num) + slot_num) % slot_num;
        stale = get_i32(b + 40 + 4 * slot) >= first;
    }
    for (Py_ssize_t i = 0; i < k && !stale; i++) {
        int64_t slot = ((cols[i] % slot_num) + slot_num) % slot_num;
        unsigned char *sp = b + 40 + 4 * slot, *e = b + entries_base + 20 * (first + i);
        int32_t prev = get_i32(sp);
        if (prev <= 0) {
            prev = 0;
            used++;
        }
        put_i32(e, (int32_t)cols[i]);
        put_i64(e + 4, cols[k + i]);
        put_i32(e + 12, time_diff);
        put_i32(e + 16, prev);
        put_i32(sp, (int32_t)(first + i));
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromLong(stale ? -1 : used);
done:
    PyMem_Free(cols);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&hashes);
    PyBuffer_Release(&phys);
    return result;
}

/* prefixed_index_hashes(data, starts, ends, prefix_hash) -> IndexFile key hashes (native int64) of prefix + each
 * span data[starts[i]:ends[i]], or None where a span holds a byte >= 0x80 (UTF-8 beyond ASCII: the caller hashes
 * its decoded text). Java's String.hashCode of prefix + value is hash(prefix) * 31**len(value) + hash(value) mod
 * 2**32 (prefix_hash: hash(prefix) as unsigned 32 bits); the key hash is its absolute value, Integer.MIN_VALUE 0. */
static PyObject *
prefixed_index_hashes(PyObject *self, PyObject *args)
{
    Py_buffer data, starts, ends;
    unsigned long long prefix_hash;
    if (!PyArg_ParseTuple(args, "y*y*y*K", &data, &starts, &ends, &prefix_hash))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t count = starts.len / (Py_ssize_t)sizeof(int64_t);
    if (starts.len != ends.len || starts.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "starts and ends must be int64 arrays of one length");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL)
        goto done;
    char *w = PyBytes_AS_STRING(out);
    const unsigned char *d = data.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t lo, hi;
        if (span_at(&starts, &ends, i, data.len, &lo, &hi) < 0) {
            Py_CLEAR(out);
            goto done;
        }
        uint32_t h = (uint32_t)prefix_hash;
        for (int64_t j = lo; j < hi; j++) {
            if (d[j] >= 0x80) {
                Py_CLEAR(out);
                out = Py_NewRef(Py_None);
                goto done;
            }
            h = h * 31u + d[j];
        }
        int32_t signed_h = (int32_t)h;
        int64_t key = signed_h == INT32_MIN ? 0 : (signed_h < 0 ? -(int64_t)signed_h : (int64_t)signed_h);
        memcpy(w + i * (Py_ssize_t)sizeof(int64_t), &key, sizeof(int64_t));
    }
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&ends);
    return out;
}

/* The last start s in [lo, hi - mlen] where d[s:s + mlen] == m (Python's bytes.rfind(m, lo, hi)), else -1. */
static Py_ssize_t
rfind_in(const unsigned char *d, Py_ssize_t lo, Py_ssize_t hi, const unsigned char *m, Py_ssize_t mlen)
{
    for (Py_ssize_t s = hi - mlen; s >= lo; s--) {
        if (d[s] == m[0] && memcmp(d + s, m, (size_t)mlen) == 0)
            return s;
    }
    return -1;
}

/* property_spans(data, starts, ends, marker) -> (record, start, end): where each record's value of the property
 * whose marker (NAME + 0x01) is given lies, for the records that have it; its properties are data[starts[i]:
 * ends[i]]. As decode_properties reads them: the last marker that begins a property (at the start or after a
 * 0x02) wins, the value ends at the next 0x02 or the end. Native int64 arrays in and out. */
static PyObject *
property_spans(PyObject *self, PyObject *args)
{
    Py_buffer data, starts, ends, marker;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &data, &starts, &ends, &marker))
        return NULL;
    PyObject *cols[3] = {NULL, NULL, NULL}, *result = NULL;
    Py_ssize_t count = starts.len / (Py_ssize_t)sizeof(int64_t), found = 0;
    if (starts.len != ends.len || starts.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "starts and ends must be int64 arrays of one length");
        goto done;
    }
    if (marker.len < 1) {
        PyErr_SetString(PyExc_ValueError, "the marker is empty");
        goto done;
    }
    for (int i = 0; i < 3; i++) {
        cols[i] = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
        if (cols[i] == NULL)
            goto done;
    }
    int64_t *rec = (int64_t *)PyBytes_AS_STRING(cols[0]), *vstart = (int64_t *)PyBytes_AS_STRING(cols[1]),
            *vend = (int64_t *)PyBytes_AS_STRING(cols[2]);
    const unsigned char *d = data.buf, *m = marker.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t lo, hi;
        if (span_at(&starts, &ends, i, data.len, &lo, &hi) < 0)
            goto done;
        Py_ssize_t j = rfind_in(d, (Py_ssize_t)lo, (Py_ssize_t)hi, m, marker.len);
        while (j > lo && d[j - 1] != 0x02)  /* inside another property's value: look further back */
            j = rfind_in(d, (Py_ssize_t)lo, j, m, marker.len);
        if (j < 0)
            continue;
        Py_ssize_t v = j + marker.len, e = v;
        while (e < hi && d[e] != 0x02)
            e++;
        rec[found] = i;
        vstart[found] = v;
        vend[found] = e;
        found++;
    }
    for (int i = 0; i < 3; i++) {
        if (_PyBytes_Resize(&cols[i], found * (Py_ssize_t)sizeof(int64_t)) < 0)
            goto done;
    }
    result = PyTuple_Pack(3, cols[0], cols[1], cols[2]);
done:
    for (int i = 0; i < 3; i++)
        Py_XDECREF(cols[i]);
    PyBuffer_Release(&data);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&ends);
    PyBuffer_Release(&marker);
    return result;
}

/* encode_records(data, body_start, props_len_pos, end, flag, header, topic_tail, first_phys, first_queue_offset,
 * store_timestamp) -> bytes: the stored records of a batch body (batch_encoder's numpy path is its twin). Record i
 * is ``header`` (the 88 bytes every record shares) with its TOTALSIZE, BODYCRC, FLAG, QUEUEOFFSET, PHYSICALOFFSET,
 * STORETIMESTAMP and BODYLENGTH, then data[body_start:props_len_pos], ``topic_tail``, data[props_len_pos:end];
 * queue offsets count up from first_queue_offset, physical offsets from first_phys by each record's size. The
 * columns are copied and checked with the GIL held, the records written with it released. */
static PyObject *
encode_records(PyObject *self, PyObject *args)
{
    Py_buffer data, bs, pl, en, fl, header, tail;
    long long first_phys, first_qoff, store_ts;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*LLL", &data, &bs, &pl, &en, &fl, &header, &tail, &first_phys,
                          &first_qoff, &store_ts))
        return NULL;
    PyObject *out = NULL;
    int64_t *cols = NULL;
    Py_ssize_t count = bs.len / (Py_ssize_t)sizeof(int64_t), total = 0;
    if (bs.len % (Py_ssize_t)sizeof(int64_t) || pl.len != bs.len || en.len != bs.len || fl.len != bs.len) {
        PyErr_SetString(PyExc_ValueError, "the columns must be int64 arrays of one length");
        goto done;
    }
    if (header.len != HEADER_SIZE) {
        PyErr_Format(PyExc_ValueError, "the header template is %zd bytes, not %d", header.len, HEADER_SIZE);
        goto done;
    }
    cols = PyMem_Malloc(4 * (size_t)(count ? count : 1) * sizeof(int64_t));
    if (cols == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t b, p, e, f;
        if (span_at(&bs, &en, i, data.len, &b, &e) < 0)
            goto done;
        memcpy(&p, (const char *)pl.buf + i * (Py_ssize_t)sizeof(int64_t), sizeof(int64_t));
        memcpy(&f, (const char *)fl.buf + i * (Py_ssize_t)sizeof(int64_t), sizeof(int64_t));
        if (p < b || p > e) {
            PyErr_Format(PyExc_ValueError, "record %zd: its properties at %lld lie outside [%lld, %lld]", i,
                         (long long)p, (long long)b, (long long)e);
            goto done;
        }
        int64_t size = HEADER_SIZE + (int64_t)tail.len + (e - b);
        if (size > INT32_MAX || total > PY_SSIZE_T_MAX - size) {
            PyErr_SetString(PyExc_OverflowError, "the records are too large");
            goto done;
        }
        total += (Py_ssize_t)size;
        cols[4 * i] = b;
        cols[4 * i + 1] = p;
        cols[4 * i + 2] = e;
        cols[4 * i + 3] = f;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    const unsigned char *d = data.buf, *h = header.buf, *t = tail.buf;
    Py_ssize_t tlen = tail.len;
    Py_BEGIN_ALLOW_THREADS
    uint64_t phys = (uint64_t)first_phys;  /* (unsigned: wraps as Java's long does, never undefined) */
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t b = cols[4 * i], p = cols[4 * i + 1], e = cols[4 * i + 2];
        int32_t size = (int32_t)(HEADER_SIZE + tlen + (e - b));
        memcpy(w, h, HEADER_SIZE);
        put_i32(w, size);
        put_i32(w + POS_BODY_CRC, (int32_t)(crc32_of(d + b, (Py_ssize_t)(p - b)) & 0x7FFFFFFF));
        put_i32(w + 16, (int32_t)cols[4 * i + 3]);
        put_i64(w + 20, (int64_t)((uint64_t)first_qoff + (uint64_t)i));
        put_i64(w + 28, (int64_t)phys);
        put_i64(w + 56, (int64_t)store_ts);
        put_i32(w + POS_BODY_LENGTH, (int32_t)(p - b));
        memcpy(w + HEADER_SIZE, d + b, (size_t)(p - b));
        memcpy(w + HEADER_SIZE + (p - b), t, (size_t)tlen);
        memcpy(w + HEADER_SIZE + (p - b) + tlen, d + p, (size_t)(e - p));
        w += size;
        phys += (uint64_t)size;
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(cols);
    PyBuffer_Release(&data);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&pl);
    PyBuffer_Release(&en);
    PyBuffer_Release(&fl);
    PyBuffer_Release(&header);
    PyBuffer_Release(&tail);
    return out;
}

/* encode_batch_record(body, properties, flag=0) -> one batch record. */
static PyObject *
encode_batch_record(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"body", "properties", "flag", NULL};
    Py_buffer body, props;
    long long flag = 0;
    if (!configured()
        || !PyArg_ParseTupleAndKeywords(args, kwds, "y*y*|L:encode_batch_record", kwlist, &body, &props, &flag))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t total = BATCH_OVERHEAD + body.len + props.len;
    if (props.len > 32767) {
        bad("batch message properties are %zd bytes, over %d", props.len, 32767);
    } else if (flag < INT32_MIN || flag > INT32_MAX) {
        bad("message flag %lld is not a 32-bit integer", flag);
    } else if (total > INT32_MAX) {
        bad("a batch record of %zd bytes is over the 2 GiB a record can hold", total);
    } else if ((out = PyBytes_FromStringAndSize(NULL, total)) != NULL) {
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
        put_i32(p, (int32_t)total);
        put_i32(p + 4, 0);
        put_i32(p + 8, 0);
        put_i32(p + 12, (int32_t)flag);
        put_i32(p + 16, (int32_t)body.len);
        memcpy(p + BATCH_HEAD, body.buf, body.len);
        p += BATCH_HEAD + body.len;
        p[0] = (unsigned char)(props.len >> 8);
        p[1] = (unsigned char)props.len;
        memcpy(p + 2, props.buf, props.len);
    }
    PyBuffer_Release(&body);
    PyBuffer_Release(&props);
    return out;
}

/* == message ids (UNIQ_KEY) ======================================================================= */

/* UniqIdClock(prefix, month_bounds): MessageIdGenerator's clock and counter. ``prefix`` is the fixed part
 * (ip, pid, salt as upper-case hex); ``month_bounds(now_ms) -> (start_ms, next_start_ms)`` is called when the
 * clock leaves the month it knows. Calls on one object are atomic under the GIL except around month_bounds,
 * after which the bounds and the counter are taken afresh. */
typedef struct {
    PyObject_HEAD
    char prefix[64];
    Py_ssize_t prefix_len;
    long long month_start, next_month;
    unsigned int counter;
    PyObject *month_bounds;
} IdClock;

static int
idclock_init(IdClock *self, PyObject *args, PyObject *kwds)
{
    PyObject *prefix, *bounds;
    static char *kwlist[] = {"prefix", "month_bounds", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UO:UniqIdClock", kwlist, &prefix, &bounds))
        return -1;
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(prefix, &n);
    if (text == NULL)
        return -1;
    if (!PyUnicode_IS_ASCII(prefix) || n > (Py_ssize_t)sizeof(self->prefix)) {
        PyErr_SetString(PyExc_ValueError, "the prefix is ASCII of at most 64 characters");
        return -1;
    }
    memcpy(self->prefix, text, n);
    self->prefix_len = n;
    self->month_start = 0;
    self->next_month = 0;
    self->counter = 0;
    Py_XSETREF(self->month_bounds, Py_NewRef(bounds));
    return 0;
}

static int
idclock_traverse(IdClock *self, visitproc visit, void *arg)
{
    Py_VISIT(self->month_bounds);
    return 0;
}

static int
idclock_clear(IdClock *self)
{
    Py_CLEAR(self->month_bounds);
    return 0;
}

static void
idclock_dealloc(IdClock *self)
{
    PyObject_GC_UnTrack(self);
    idclock_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The month start for now_ms (calling month_bounds when needed); -1 with an exception set on failure. */
static int
idclock_month(IdClock *self, long long now_ms, long long *start)
{
    if (self->month_start <= now_ms && now_ms < self->next_month) {
        *start = self->month_start;
        return 0;
    }
    PyObject *r = PyObject_CallFunction(self->month_bounds, "L", now_ms);
    if (r == NULL)
        return -1;
    long long a, b;
    int ok = PyArg_ParseTuple(r, "LL", &a, &b);
    Py_DECREF(r);
    if (!ok)
        return -1;
    self->month_start = a;
    self->next_month = b;
    *start = a;
    return 0;
}

static long long
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static PyObject *
idclock_id(IdClock *self, long long span, unsigned int counter)
{
    static const char hex[] = "0123456789ABCDEF";
    PyObject *out = PyUnicode_New(self->prefix_len + 12, 127);
    if (out == NULL)
        return NULL;
    Py_UCS1 *p = PyUnicode_1BYTE_DATA(out);
    memcpy(p, self->prefix, self->prefix_len);
    p += self->prefix_len;
    uint32_t s = (uint32_t)span;  /* Java's int cast: the raw 32 bits */
    for (int i = 7; i >= 0; i--, s >>= 4)
        p[i] = hex[s & 0xF];
    for (int i = 11; i >= 8; i--, counter >>= 4)
        p[i] = hex[counter & 0xF];
    return out;
}

static PyObject *
idclock_create(IdClock *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long now;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "create(now_ms=None)");
        return NULL;
    }
    if (nargs == 1 && args[0] != Py_None) {
        now = PyLong_AsLongLong(args[0]);
        if (now == -1 && PyErr_Occurred())
            return NULL;
    } else {
        now = now_ms();
    }
    long long start;
    if (idclock_month(self, now, &start) < 0)
        return NULL;
    unsigned int counter = self->counter & 0xFFFF;
    self->counter = (counter + 1) & 0xFFFF;
    return idclock_id(self, now - start, counter);
}

static PyObject *
idclock_create_many(IdClock *self, PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "create_many(n) needs n >= 0");
        return NULL;
    }
    long long now = now_ms(), start;
    if (idclock_month(self, now, &start) < 0)
        return NULL;
    unsigned int first = self->counter & 0xFFFF;
    self->counter = (unsigned int)((first + (size_t)n) & 0xFFFF);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *id = idclock_id(self, now - start, (unsigned int)((first + (size_t)i) & 0xFFFF));
        if (id == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, id);
    }
    return out;
}

static PyMethodDef idclock_methods[] = {
    {"create", (PyCFunction)(void (*)(void))idclock_create, METH_FASTCALL,
     "create(now_ms=None) -> a new id: the prefix, ms since the month's start (8 hex), the counter (4 hex)."},
    {"create_many", (PyCFunction)idclock_create_many, METH_O, "create_many(n) -> n ids from one clock read."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef idclock_members[] = {
    {"counter", T_UINT, offsetof(IdClock, counter), 0, "the next id's counter (16 bits)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject IdClockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sluice._speedups.UniqIdClock",
    .tp_basicsize = sizeof(IdClock),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "MessageIdGenerator's clock and counter.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)idclock_init,
    .tp_dealloc = (destructor)idclock_dealloc,
    .tp_traverse = (traverseproc)idclock_traverse,
    .tp_clear = (inquiry)idclock_clear,
    .tp_methods = idclock_methods,
    .tp_members = idclock_members,
};

/* == writing mapped pages without the GIL ======================================================== */

/* store_spans(buf, spans, positions=b"", values=b"", width=4): copy each (offset, bytes) of the list spans into
 * the writable buffer buf, and value i of values (width bytes each) at positions[i] (native int64), with the GIL
 * released while the bytes are copied: a page of a mapped file that the kernel is writing back, or that it must
 * throttle, keeps only this thread waiting, not every thread of the process. Every span is checked against the
 * buffer before anything is written. */
static PyObject *
store_spans(PyObject *self, PyObject *args)
{
    Py_buffer dst, pos = {0}, val = {0};
    PyObject *spans;
    Py_ssize_t width = 4;
    if (!PyArg_ParseTuple(args, "w*O!|y*y*n", &dst, &PyList_Type, &spans, &pos, &val, &width))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(spans);
    Py_buffer *srcs = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(Py_buffer));
    Py_ssize_t *offs = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(Py_ssize_t));
    Py_ssize_t got = 0;
    if (srcs == NULL || offs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++) {
        PyObject *item = PyList_GET_ITEM(spans, got);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "store_spans: each span is an (offset, bytes) tuple");
            goto done;
        }
        Py_ssize_t off = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 0));
        if (off == -1 && PyErr_Occurred())
            goto done;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 1), &srcs[got], PyBUF_SIMPLE) < 0)
            goto done;
        if (off < 0 || srcs[got].len > dst.len - off) {
            PyBuffer_Release(&srcs[got]);
            PyErr_Format(PyExc_ValueError, "store_spans: %zd bytes at %zd do not fit a buffer of %zd", srcs[got].len,
                         off, dst.len);
            goto done;
        }
        offs[got] = off;
    }
    Py_ssize_t count = pos.buf != NULL ? pos.len / 8 : 0;
    if (width < 1 || width > 8 || (pos.buf != NULL && pos.len % 8 != 0) ||
            (val.buf != NULL ? val.len : 0) != count * width) {
        PyErr_SetString(PyExc_ValueError, "store_spans: positions are int64 and values hold width bytes for each");
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t p;
        memcpy(&p, (const char *)pos.buf + 8 * i, 8);
        if (p < 0 || p > (int64_t)(dst.len - width)) {
            PyErr_Format(PyExc_ValueError, "store_spans: a value at %lld does not fit a buffer of %zd", (long long)p,
                         dst.len);
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        memcpy((char *)dst.buf + offs[i], srcs[i].buf, (size_t)srcs[i].len);
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t p;
        memcpy(&p, (const char *)pos.buf + 8 * i, 8);
        memcpy((char *)dst.buf + p, (const char *)val.buf + width * i, (size_t)width);
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&srcs[i]);
    PyMem_Free(srcs);
    PyMem_Free(offs);
    PyBuffer_Release(&dst);
    if (pos.buf != NULL)
        PyBuffer_Release(&pos);
    if (val.buf != NULL)
        PyBuffer_Release(&val);
    return result;
}

/* == module ====================================================================================== */

static PyMethodDef methods[] = {
    {"configure", configure, METH_O, "configure(MessageFormatError): what the decoders raise."},
    {"message_type", message_type, METH_VARARGS,
     "message_type(MessageExt, host_text): what decode_records builds, and how it names a host field."},
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(buf, hosts) -> list[MessageExt]: a concatenation of whole v1 records."},
    {"check_record", check_record, METH_VARARGS,
     "check_record(buf, pos, limit, check_crc=True) -> size (0 clean end, -1 BLANK filler)."},
    {"scan_batch", scan_batch, METH_VARARGS,
     "scan_batch(body) -> (body_start, props_len_pos, end, flag) as native int64 bytes."},
    {"encode_records", encode_records, METH_VARARGS,
     "encode_records(data, body_start, props_len_pos, end, flag, header, topic_tail, first_phys, first_queue_offset, "
     "store_timestamp) -> a batch body's stored records."},
    {"spans_hold_nul", spans_hold_nul, METH_VARARGS,
     "spans_hold_nul(data, starts, ends) -> whether a span holds a NUL byte (native int64 arrays)."},
    {"index_put_many", index_put_many, METH_VARARGS,
     "index_put_many(buf, slot_num, entries_base, first_number, hashes, phys, time_diff) -> slots newly used, or -1."},
    {"prefixed_index_hashes", prefixed_index_hashes, METH_VARARGS,
     "prefixed_index_hashes(data, starts, ends, prefix_hash) -> IndexFile hashes of prefix + each span, or None."},
    {"property_spans", property_spans, METH_VARARGS,
     "property_spans(data, starts, ends, marker) -> (record, start, end) of a property's values, native int64."},
    {"encode_batch_record", (PyCFunction)(void (*)(void))encode_batch_record, METH_VARARGS | METH_KEYWORDS,
     "encode_batch_record(body, properties, flag=0) -> one batch record."},
    {"store_spans", store_spans, METH_VARARGS,
     "store_spans(buf, spans, positions=b'', values=b'', width=4): copy spans and values into buf, GIL released."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "sluice._speedups", "Sluice's per-message codecs in C (pure-Python twins are the "
    "reference).", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    crc_init();
    if (PyType_Ready(&IdClockType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "UniqIdClock", (PyObject *)&IdClockType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
