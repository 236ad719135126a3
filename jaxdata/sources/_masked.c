/* jaxdata.sources._masked: masked records (ids, then one mask byte per id) split into ids and masks.
 *
 * A read of a fine-tuning dataset joins its records' bytes: record i is n_i ids of
 * `itemsize` bytes, then n_i mask bytes. The ids and masks are two memcpys per record
 * here; NumPy needs a byte mask over the whole read and two boolean gathers (~10x
 * slower). The Python wrapper and the NumPy version live in masked.py beside this file.
 * Past RELEASE_GIL_AT tokens the GIL is released. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define RELEASE_GIL_AT ((int64_t)1 << 20)

static int checked_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, const char *name) {
  int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, view, flags) < 0) {
    return -1;
  }
  if (itemsize && view->len % itemsize) {
    PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte items", name, view->len,
                 itemsize);
    PyBuffer_Release(view);
    return -1;
  }
  return 0;
}

static void release_all(Py_buffer *views, int count) {
  for (int i = 0; i < count; i++) {
    PyBuffer_Release(&views[i]);
  }
}

PyDoc_STRVAR(split_masked_doc,
"split_masked(joined, lengths, itemsize, tokens, mask)\n\n"
"Masked records back to back in `joined` (bytes: record i is lengths[i] ids of\n"
"`itemsize` bytes, then lengths[i] mask bytes): copies the ids into `tokens`\n"
"(bytes, sum(lengths) x itemsize) and the masks into `mask` (sum(lengths)).\n"
"Returns the index of the first mask byte above 1, or -1.");

static PyObject *split_masked(PyObject *self, PyObject *args) {
  PyObject *joined_obj, *lengths_obj, *tokens_obj, *mask_obj;
  Py_ssize_t itemsize;
  if (!PyArg_ParseTuple(args, "OOnOO", &joined_obj, &lengths_obj, &itemsize, &tokens_obj, &mask_obj)) {
    return NULL;
  }
  Py_buffer views[4];
  int count = 0;
  if (checked_buffer(joined_obj, &views[count++], 0, 0, "joined") < 0 ||
      checked_buffer(lengths_obj, &views[count++], 0, 8, "lengths") < 0 ||
      checked_buffer(tokens_obj, &views[count++], 1, 0, "tokens") < 0 ||
      checked_buffer(mask_obj, &views[count++], 1, 0, "mask") < 0) {
    release_all(views, count - 1);
    return NULL;
  }
  const int64_t *lengths = views[1].buf;
  const Py_ssize_t records = views[1].len / 8;
  int64_t total = 0;
  const char *problem = itemsize < 1 || itemsize > 8 ? "itemsize must be in [1, 8]" : NULL;
  for (Py_ssize_t i = 0; !problem && i < records; i++) {
    if (lengths[i] < 0) problem = "a length is negative";
    total += lengths[i];
  }
  if (!problem && (views[0].len != total * (itemsize + 1) || views[2].len != total * itemsize || views[3].len != total))
    problem = "joined, tokens and mask must hold sum(lengths) x (itemsize + 1), x itemsize and x 1 bytes";
  if (problem) {
    PyErr_Format(PyExc_ValueError, "split_masked: %s", problem);
    release_all(views, count);
    return NULL;
  }
  const char *in = views[0].buf;
  char *tokens = views[2].buf;
  uint8_t *mask = views[3].buf;
  PyThreadState *released = total >= RELEASE_GIL_AT ? PyEval_SaveThread() : NULL;
  int64_t bad = -1, at = 0, done = 0;
  for (Py_ssize_t i = 0; i < records; i++) {
    const int64_t n = lengths[i];
    memcpy(tokens + done * itemsize, in + at, (size_t)(n * itemsize));
    memcpy(mask + done, in + at + n * itemsize, (size_t)n);
    at += n * (itemsize + 1);
    done += n;
  }
  for (int64_t k = 0; k < total && bad < 0; k++) {
    if (mask[k] > 1) bad = k;
  }
  if (released) PyEval_RestoreThread(released);
  release_all(views, count);
  return PyLong_FromLongLong(bad);
}

static PyMethodDef methods[] = {
    {"split_masked", split_masked, METH_VARARGS, split_masked_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "jaxdata.sources._masked",
    "Masked records split into ids and masks (see jaxdata.sources.masked).", -1, methods,
};

PyMODINIT_FUNC PyInit__masked(void) { return PyModule_Create(&module); }
