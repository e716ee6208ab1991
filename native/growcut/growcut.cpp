// Competitive region growing (the GrowCut family, as Fast GrowCut: Zhu et al., MICCAI-IMIC 2014):
// every voxel of the region of interest takes the class of the seed it is closest to, where the
// length of a path is the sum over its face steps of |intensity difference| plus a per-axis step
// cost (the seed locality). A Dijkstra search on integer costs with a bucket queue (Dial's
// algorithm): every cost is a small integer, so a push is an append and a pop a read, instead of a
// heap's log n. Ties (equal distance) go to the smallest class, in any visiting order: a voxel
// whose class improves at the same distance is visited again. Seeds never change.
//
// The state (distance, class, parent step, intensity) lives in one NumPy structured array the caller
// owns, so an update after a new seed stroke starts from the previous result (only what the new seeds
// reach closer is visited), and erasing seeds re-grows only the voxels whose path started at an
// erased seed.
//
// The NumPy reference of the same algorithm is medseg/edit/tools/grow_seeds.py (`_propagate_numpy`);
// tests/edit/test_grow_seeds.py checks both against a plain Dijkstra.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

namespace {

constexpr uint32_t kInf = 0xFFFFFFFFu;
constexpr uint8_t kRoot = 6;  // parent code of a seed
constexpr uint8_t kNone = 7;  // parent code of a voxel not reached
// The search is bound by memory latency (a z neighbour is a slice away). Prefetching the voxels of the
// bucket entry 8 ahead and their y/z neighbours halved the growth of a 15.8 M-voxel liver region
// (2.9 -> 1.5 s CPU, on a shared 2-core machine; 4, 16 and 32 ahead were slower).
constexpr size_t kAhead = 8;

inline void prefetch(const void* address) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(address, 1);
#else
  (void)address;
#endif
}

// One voxel's whole state in 8 bytes (NumPy: a structured array with these fields in this order), so
// a neighbour's distance, class, parent and intensity arrive in one cache line instead of four.
struct Voxel {
  uint32_t distance;
  int16_t intensity;  // in integer cost units
  uint8_t label;
  uint8_t parent;  // 0..5: the neighbour the best path came from; kRoot; kNone
};
static_assert(sizeof(Voxel) == 8, "Voxel must pack into 8 bytes");

struct Grid {
  Voxel* voxel;
  uint32_t nz, ny, nx, slice, count;
  uint32_t step[3];  // per-axis step cost (z, y, x)
  uint32_t max_weight;
};

// The six face neighbours of a voxel (-1 outside the grid), from one division per voxel: a 64-bit
// division per neighbour made the search 3x slower.
struct Neighbours {
  int64_t at[6];
  Neighbours(const Grid& g, uint32_t i) {
    uint32_t x = i % g.nx, row = i / g.nx;
    uint32_t y = row % g.ny, z = row / g.ny;
    at[0] = z > 0 ? int64_t(i) - g.slice : -1;
    at[1] = z + 1 < g.nz ? int64_t(i) + g.slice : -1;
    at[2] = y > 0 ? int64_t(i) - g.nx : -1;
    at[3] = y + 1 < g.ny ? int64_t(i) + g.nx : -1;
    at[4] = x > 0 ? int64_t(i) - 1 : -1;
    at[5] = x + 1 < g.nx ? int64_t(i) + 1 : -1;
  }
};

// Dijkstra from ``front`` (voxels whose distance and class are already set), improving the rest.
// Buckets: a power of two above the largest step cost, so a distance's bucket is a mask, not a modulo.
void propagate(Grid& g, std::vector<uint32_t>& front) {
  Voxel* vox = g.voxel;
  std::sort(front.begin(), front.end(), [&](uint32_t a, uint32_t b) { return vox[a].distance < vox[b].distance; });
  size_t n_buckets = 1;
  while (n_buckets <= g.max_weight) n_buckets <<= 1;
  const uint64_t mask = n_buckets - 1;
  std::vector<std::vector<uint32_t>> buckets(n_buckets);
  size_t pending = 0;
  size_t next_front = 0;
  uint64_t current = 0;
  while (true) {
    if (pending == 0) {
      while (next_front < front.size() && vox[front[next_front]].distance == kInf) next_front++;
      if (next_front >= front.size()) break;
      current = vox[front[next_front]].distance;
    } else {
      while (buckets[current & mask].empty() &&
             !(next_front < front.size() && vox[front[next_front]].distance <= current)) {
        current++;
      }
    }
    std::vector<uint32_t>& bucket = buckets[current & mask];
    while (next_front < front.size() && vox[front[next_front]].distance <= current) {
      uint32_t v = front[next_front++];
      if (vox[v].distance == current) {
        bucket.push_back(v);
        pending++;
      }
    }
    for (size_t i = 0; i < bucket.size(); i++) {  // the bucket may grow while it is read (zero-cost steps)
      if (i + kAhead < bucket.size()) {  // ask for the voxels a few entries ahead: their lines arrive meanwhile
        const uint32_t w = bucket[i + kAhead];
        prefetch(&vox[w]);
        if (w >= g.slice) prefetch(&vox[w - g.slice]);
        if (w + g.slice < g.count) prefetch(&vox[w + g.slice]);
        if (w >= g.nx) prefetch(&vox[w - g.nx]);
        if (w + g.nx < g.count) prefetch(&vox[w + g.nx]);
      }
      const uint32_t u = bucket[i];
      pending--;
      const Voxel here = vox[u];
      if (here.distance != current) continue;  // a stale entry: u was reached closer since
      const Neighbours around(g, u);
      for (int direction = 0; direction < 6; direction++) {
        const int64_t v = around.at[direction];
        if (v < 0) continue;
        Voxel& there = vox[v];
        if (there.parent == kRoot) continue;
        int32_t difference = int32_t(there.intensity) - here.intensity;
        uint64_t candidate = uint64_t(here.distance) + uint32_t(difference < 0 ? -difference : difference) +
                             g.step[direction >> 1];
        if (candidate >= kInf) candidate = kInf - 1;
        if (candidate < there.distance || (candidate == there.distance && here.label < there.label)) {
          there.distance = uint32_t(candidate);
          there.label = here.label;
          there.parent = uint8_t(direction ^ 1);  // the step back towards u
          buckets[candidate & mask].push_back(uint32_t(v));
          pending++;
        }
      }
    }
    bucket.clear();
  }
}

void forget_voxel(Voxel& v) {
  v.distance = kInf;
  v.label = 0;
  v.parent = kNone;
}

// Every voxel whose best path starts at one of ``roots`` (their subtrees) is forgotten; the
// voxels next to them that keep their path become the front that grows back into them.
void forget(Grid& g, const int64_t* roots, Py_ssize_t n_roots, std::vector<uint32_t>& front) {
  Voxel* vox = g.voxel;
  std::vector<uint32_t> stack;
  for (Py_ssize_t i = 0; i < n_roots; i++) {
    uint32_t r = uint32_t(roots[i]);
    if (vox[r].parent == kNone) continue;
    forget_voxel(vox[r]);
    stack.push_back(r);
  }
  std::vector<uint32_t> forgotten;
  while (!stack.empty()) {
    uint32_t u = stack.back();
    stack.pop_back();
    forgotten.push_back(u);
    const Neighbours around(g, u);
    for (int direction = 0; direction < 6; direction++) {
      int64_t v = around.at[direction];
      if (v < 0 || vox[v].parent >= kRoot) continue;
      if (vox[v].parent == (direction ^ 1)) {  // v's path came through u
        forget_voxel(vox[v]);
        stack.push_back(uint32_t(v));
      }
    }
  }
  for (uint32_t u : forgotten) {
    const Neighbours around(g, u);
    for (int direction = 0; direction < 6; direction++) {
      int64_t v = around.at[direction];
      if (v >= 0 && vox[v].distance != kInf) front.push_back(uint32_t(v));
    }
  }
}

// Every voxel forgotten, then the seeds (``classes`` != 0) planted and grown: a full growth in one call.
void plant(Grid& g, const uint8_t* classes, std::vector<uint32_t>& front) {
  for (uint32_t i = 0; i < g.count; i++) {
    Voxel& v = g.voxel[i];
    if (classes[i]) {
      v.distance = 0;
      v.label = classes[i];
      v.parent = kRoot;
      front.push_back(i);
    } else {
      forget_voxel(v);
    }
  }
}

struct Buffers {
  Py_buffer state{}, indices{};
  ~Buffers() {
    for (Py_buffer* b : {&state, &indices})
      if (b->obj) PyBuffer_Release(b);
  }
};

// Parse (state, (nz, ny, nx), (sz, sy, sx), max_weight, indices or classes).
bool parse(PyObject* args, Buffers& buffers, Grid& g, Py_ssize_t index_itemsize) {
  unsigned long sz, sy, sx, max_weight;
  long long nz, ny, nx;
  if (!PyArg_ParseTuple(args, "w*(LLL)(kkk)ky*", &buffers.state, &nz, &ny, &nx, &sz, &sy, &sx, &max_weight,
                        &buffers.indices))
    return false;
  if (nz < 1 || ny < 1 || nx < 1 || nz * ny * nx >= (1ll << 32)) {
    PyErr_SetString(PyExc_ValueError, "the region of interest must hold 1 to 4 G voxels");
    return false;
  }
  Py_ssize_t count = Py_ssize_t(nz * ny * nx);
  if (buffers.state.len != Py_ssize_t(sizeof(Voxel)) * count) {
    PyErr_Format(PyExc_ValueError, "state: expected %zd voxels of 8 bytes, got %zd bytes", count, buffers.state.len);
    return false;
  }
  if (buffers.indices.len % index_itemsize ||
      (index_itemsize == 1 && buffers.indices.len != count)) {
    PyErr_SetString(PyExc_ValueError, index_itemsize == 8 ? "indices: expected int64" : "classes: one uint8 per voxel");
    return false;
  }
  if (max_weight > (1ul << 24)) {
    PyErr_SetString(PyExc_ValueError, "max_weight too large for a bucket queue");
    return false;
  }
  g.voxel = static_cast<Voxel*>(buffers.state.buf);
  g.nz = uint32_t(nz);
  g.ny = uint32_t(ny);
  g.nx = uint32_t(nx);
  g.slice = uint32_t(nx * ny);
  g.count = uint32_t(nx * ny * nz);
  g.step[0] = uint32_t(sz);
  g.step[1] = uint32_t(sy);
  g.step[2] = uint32_t(sx);
  g.max_weight = uint32_t(max_weight);
  if (index_itemsize == 8) {
    const int64_t* indices = static_cast<const int64_t*>(buffers.indices.buf);
    for (Py_ssize_t i = 0; i < buffers.indices.len / 8; i++) {
      if (indices[i] < 0 || indices[i] >= count) {
        PyErr_SetString(PyExc_IndexError, "index outside the grid");
        return false;
      }
    }
  }
  return true;
}

// Parse, then run ``work(grid, front, indices, count)`` without the GIL (a worker thread grows while the
// window keeps drawing); ``itemsize`` 8: int64 voxel indices, 1: one uint8 class per voxel.
template <class Work>
PyObject* run(PyObject* args, Py_ssize_t itemsize, Work work) {
  Buffers buffers;
  Grid g;
  if (!parse(args, buffers, g, itemsize)) return nullptr;
  const void* data = buffers.indices.buf;
  Py_ssize_t count = buffers.indices.len / itemsize;
  Py_BEGIN_ALLOW_THREADS
  std::vector<uint32_t> front;
  work(g, front, data, count);
  propagate(g, front);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

PyObject* py_grow(PyObject*, PyObject* args) {
  return run(args, 8, [](Grid&, std::vector<uint32_t>& front, const void* data, Py_ssize_t count) {
    const int64_t* indices = static_cast<const int64_t*>(data);
    front.assign(indices, indices + count);
  });
}

PyObject* py_ungrow(PyObject*, PyObject* args) {
  return run(args, 8, [](Grid& g, std::vector<uint32_t>& front, const void* data, Py_ssize_t count) {
    forget(g, static_cast<const int64_t*>(data), count, front);
  });
}

PyObject* py_plant(PyObject*, PyObject* args) {
  return run(args, 1, [](Grid& g, std::vector<uint32_t>& front, const void* data, Py_ssize_t) {
    plant(g, static_cast<const uint8_t*>(data), front);
  });
}

PyMethodDef methods[] = {
    {"grow", py_grow, METH_VARARGS,
     "grow(state, shape_zyx, step_zyx, max_weight, front): grow from the front voxels (int64 indices)"},
    {"ungrow", py_ungrow, METH_VARARGS,
     "ungrow(state, shape_zyx, step_zyx, max_weight, roots): forget the paths that start at roots (int64 "
     "indices), then grow back into them"},
    {"plant", py_plant, METH_VARARGS,
     "plant(state, shape_zyx, step_zyx, max_weight, classes): forget everything, plant the seeds (uint8 class "
     "per voxel, 0: none) and grow them"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_growcut", "Competitive region growing kernel (see growcut.cpp)",
                      -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__growcut(void) { return PyModule_Create(&module); }
