// Competitive region growing (the GrowCut family, as Fast GrowCut: Zhu et al., MICCAI-IMIC 2014):
// every voxel of the region of interest takes the class of the seed it is closest to, where the
// length of a path is the sum over its face steps of |intensity difference| plus a per-axis step
// cost (the seed locality). A Dijkstra search on integer costs with a bucket queue (Dial's
// algorithm): every cost is a small integer, so a push is an append and a pop a read, instead of a
// heap's log n. Ties (equal distance) go to the smallest class, in any visiting order: a voxel
// whose class improves at the same distance is visited again. Seeds never change.
//
// The state (distance, class, parent step) lives in NumPy arrays the caller owns, so an update
// after a new seed stroke starts from the previous result (only what the new seeds reach closer
// is visited), and erasing seeds re-grows only the voxels whose path started at an erased seed.
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

struct Grid {
  const int32_t* intensity;  // scaled to integer cost units
  uint32_t* distance;
  uint8_t* label;
  uint8_t* parent;  // 0..5: the neighbour the best path came from; kRoot; kNone
  int64_t nz, ny, nx;
  uint32_t step[3];  // per-axis step cost (z, y, x)
  int64_t offset[1];  // voxels per slice
  uint32_t max_weight;
};

// The six face neighbours of a voxel (-1 outside the grid), from one division per voxel: a 64-bit
// division per neighbour made the search 3x slower.
struct Neighbours {
  int64_t at[6];
  Neighbours(const Grid& g, int64_t index) {
    uint32_t i = uint32_t(index);
    uint32_t x = i % uint32_t(g.nx), row = i / uint32_t(g.nx);
    uint32_t y = row % uint32_t(g.ny), z = row / uint32_t(g.ny);
    at[0] = z > 0 ? index - g.offset[0] : -1;
    at[1] = z + 1 < g.nz ? index + g.offset[0] : -1;
    at[2] = y > 0 ? index - g.nx : -1;
    at[3] = y + 1 < g.ny ? index + g.nx : -1;
    at[4] = x > 0 ? index - 1 : -1;
    at[5] = x + 1 < g.nx ? index + 1 : -1;
  }
};

// Dijkstra from ``front`` (voxels whose distance and class are already set), improving the rest.
void propagate(Grid& g, std::vector<int64_t>& front) {
  std::sort(front.begin(), front.end(), [&](int64_t a, int64_t b) { return g.distance[a] < g.distance[b]; });
  const size_t n_buckets = size_t(g.max_weight) + 1;
  std::vector<std::vector<int64_t>> buckets(n_buckets);
  size_t pending = 0;
  size_t next_front = 0;
  uint64_t current = 0;
  while (true) {
    if (pending == 0) {
      while (next_front < front.size() && g.distance[front[next_front]] == kInf) next_front++;
      if (next_front >= front.size()) break;
      current = g.distance[front[next_front]];
    } else {
      while (buckets[current % n_buckets].empty() &&
             !(next_front < front.size() && g.distance[front[next_front]] <= current)) {
        current++;
      }
    }
    std::vector<int64_t>& bucket = buckets[current % n_buckets];
    while (next_front < front.size() && g.distance[front[next_front]] <= current) {
      int64_t v = front[next_front++];
      if (g.distance[v] == current) {
        bucket.push_back(v);
        pending++;
      }
    }
    for (size_t i = 0; i < bucket.size(); i++) {  // the bucket may grow while it is read (zero-cost steps)
      int64_t u = bucket[i];
      pending--;
      if (g.distance[u] != current) continue;  // a stale entry: u was reached closer since
      const uint32_t du = g.distance[u];
      const uint8_t lu = g.label[u];
      const int32_t iu = g.intensity[u];
      const Neighbours around(g, u);
      for (int direction = 0; direction < 6; direction++) {
        int64_t v = around.at[direction];
        if (v < 0 || g.parent[v] == kRoot) continue;
        int32_t difference = g.intensity[v] - iu;
        uint64_t candidate = uint64_t(du) + uint32_t(difference < 0 ? -difference : difference) + g.step[direction / 2];
        if (candidate >= kInf) candidate = kInf - 1;
        uint32_t dv = g.distance[v];
        if (candidate < dv || (candidate == dv && lu < g.label[v])) {
          g.distance[v] = uint32_t(candidate);
          g.label[v] = lu;
          g.parent[v] = uint8_t(direction ^ 1);  // the step back towards u
          std::vector<int64_t>& target = buckets[candidate % n_buckets];
          target.push_back(v);
          pending++;
        }
      }
    }
    bucket.clear();
  }
}

// Every voxel whose best path starts at one of ``roots`` (their subtrees) is forgotten; the
// voxels next to them that keep their path become the front that grows back into them.
void forget(Grid& g, const int64_t* roots, Py_ssize_t n_roots, std::vector<int64_t>& front) {
  std::vector<int64_t> stack;
  for (Py_ssize_t i = 0; i < n_roots; i++) {
    int64_t r = roots[i];
    if (g.parent[r] == kNone) continue;
    g.parent[r] = kNone;
    g.distance[r] = kInf;
    g.label[r] = 0;
    stack.push_back(r);
  }
  std::vector<int64_t> forgotten;
  while (!stack.empty()) {
    int64_t u = stack.back();
    stack.pop_back();
    forgotten.push_back(u);
    const Neighbours around(g, u);
    for (int direction = 0; direction < 6; direction++) {
      int64_t v = around.at[direction];
      if (v < 0 || g.parent[v] >= kRoot) continue;
      if (g.parent[v] == (direction ^ 1)) {  // v's path came through u
        g.parent[v] = kNone;
        g.distance[v] = kInf;
        g.label[v] = 0;
        stack.push_back(v);
      }
    }
  }
  for (int64_t u : forgotten) {
    const Neighbours around(g, u);
    for (int direction = 0; direction < 6; direction++) {
      int64_t v = around.at[direction];
      if (v >= 0 && g.distance[v] != kInf) front.push_back(v);
    }
  }
}

struct Buffers {
  Py_buffer intensity{}, distance{}, label{}, parent{}, indices{};
  ~Buffers() {
    for (Py_buffer* b : {&intensity, &distance, &label, &parent, &indices})
      if (b->obj) PyBuffer_Release(b);
  }
};

bool check(const Py_buffer& b, Py_ssize_t itemsize, Py_ssize_t count, const char* name) {
  if (b.itemsize != itemsize || b.len != itemsize * count) {
    PyErr_Format(PyExc_ValueError, "%s: expected %zd items of %zd bytes, got %zd bytes of %zd", name, count,
                 itemsize, b.len, b.itemsize);
    return false;
  }
  return true;
}

// Parse (intensity, distance, label, parent, (nz, ny, nx), (sz, sy, sx), max_weight, indices).
bool parse(PyObject* args, Buffers& buffers, Grid& g) {
  unsigned long sz, sy, sx, max_weight;
  long long nz, ny, nx;
  if (!PyArg_ParseTuple(args, "y*w*w*w*(LLL)(kkk)ky*", &buffers.intensity, &buffers.distance, &buffers.label,
                        &buffers.parent, &nz, &ny, &nx, &sz, &sy, &sx, &max_weight, &buffers.indices))
    return false;
  Py_ssize_t count = Py_ssize_t(nz * ny * nx);
  if (nz * ny * nx >= (1ll << 32)) {
    PyErr_SetString(PyExc_ValueError, "the region of interest is too large (4 G voxels or more)");
    return false;
  }
  if (nz < 1 || ny < 1 || nx < 1 || !check(buffers.intensity, 4, count, "intensity") ||
      !check(buffers.distance, 4, count, "distance") || !check(buffers.label, 1, count, "label") ||
      !check(buffers.parent, 1, count, "parent"))
    return false;
  if (buffers.indices.itemsize != 8 || buffers.indices.len % 8) {
    PyErr_SetString(PyExc_ValueError, "indices: expected int64");
    return false;
  }
  if (max_weight > (1ul << 24)) {
    PyErr_SetString(PyExc_ValueError, "max_weight too large for a bucket queue");
    return false;
  }
  g.intensity = static_cast<const int32_t*>(buffers.intensity.buf);
  g.distance = static_cast<uint32_t*>(buffers.distance.buf);
  g.label = static_cast<uint8_t*>(buffers.label.buf);
  g.parent = static_cast<uint8_t*>(buffers.parent.buf);
  g.nz = nz;
  g.ny = ny;
  g.nx = nx;
  g.offset[0] = nx * ny;
  g.step[0] = uint32_t(sz);
  g.step[1] = uint32_t(sy);
  g.step[2] = uint32_t(sx);
  g.max_weight = uint32_t(max_weight);
  const int64_t* indices = static_cast<const int64_t*>(buffers.indices.buf);
  for (Py_ssize_t i = 0; i < buffers.indices.len / 8; i++) {
    if (indices[i] < 0 || indices[i] >= count) {
      PyErr_SetString(PyExc_IndexError, "index outside the grid");
      return false;
    }
  }
  return true;
}

PyObject* py_grow(PyObject*, PyObject* args) {
  Buffers buffers;
  Grid g;
  if (!parse(args, buffers, g)) return nullptr;
  const int64_t* indices = static_cast<const int64_t*>(buffers.indices.buf);
  std::vector<int64_t> front(indices, indices + buffers.indices.len / 8);
  Py_BEGIN_ALLOW_THREADS  // a worker thread grows while the window keeps drawing
  propagate(g, front);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

PyObject* py_ungrow(PyObject*, PyObject* args) {
  Buffers buffers;
  Grid g;
  if (!parse(args, buffers, g)) return nullptr;
  const int64_t* roots = static_cast<const int64_t*>(buffers.indices.buf);
  Py_ssize_t n_roots = buffers.indices.len / 8;
  Py_BEGIN_ALLOW_THREADS
  std::vector<int64_t> front;
  forget(g, roots, n_roots, front);
  propagate(g, front);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"grow", py_grow, METH_VARARGS,
     "grow(intensity, distance, label, parent, shape_zyx, step_zyx, max_weight, front): grow from the front voxels"},
    {"ungrow", py_ungrow, METH_VARARGS,
     "ungrow(intensity, distance, label, parent, shape_zyx, step_zyx, max_weight, roots): forget the paths "
     "that start at roots, then grow back into them"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_growcut", "Competitive region growing kernel (see growcut.cpp)",
                      -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__growcut(void) { return PyModule_Create(&module); }
