// The backend seam: where a model's weights, forward scratch and sequence state live, and the compute the blocks
// run on them. models/ and runtime/ see only this interface; the CPU backend (backend/cpu.cpp) is quant/ + ops/
// as they are, its ISA choice its own detail. A device backend (CUDA) implements the same class: its Buffers
// hold device memory (data() is then a device address, never dereferenced on the host by the blocks), read()
// and write() copy to and from the host, and every compute call below runs on the device. docs/ARCHITECTURE.md
// says what a CUDA backend would add and where the blocks still read host values (routing ids, counts).
//
// One forward at a time per backend instance: a backend may keep per-call workspace (the CPU's grouped-FFN
// activations). Each loaded model owns its backend.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/matrix.h"
#include "ops/attention.h"
#include "ops/delta_rule.h"
#include "ops/mla.h"
#include "ops/moe.h"

namespace tern::backend {

enum class BufferKind { kWeights, kScratch, kState };
const char* kind_name(BufferKind kind);

// Bytes of each kind a backend has allocated and not yet freed; buffers hold it too (they may outlive it).
struct LiveBytes {
  std::atomic<uint64_t> bytes[3] = {0, 0, 0};
};

// Memory a backend owns. Contents start zeroed.
class Buffer {
 public:
  virtual ~Buffer() { live_->bytes[static_cast<int>(kind_)] -= bytes_; }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  BufferKind kind() const { return kind_; }
  size_t bytes() const { return bytes_; }
  // Backend memory for the backend's compute calls (host memory on the CPU backend).
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  template <typename T>
  T* as() { return reinterpret_cast<T*>(data_); }
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data_); }
  // Host <-> buffer copies (weights at load, state snapshots, logits). Throw Error outside [0, bytes()).
  virtual void write(size_t off, const void* src, size_t n) = 0;
  virtual void read(size_t off, void* dst, size_t n) const = 0;
  virtual void zero() = 0;
  // The bytes [off, off + n) are no longer needed: the memory behind them may go back to the system (whole pages
  // of large buffers on the CPU), and they read as unspecified until written again.
  virtual void discard(size_t off, size_t n) = 0;

 protected:
  Buffer(BufferKind kind, size_t bytes, uint8_t* data, std::shared_ptr<LiveBytes> live)
      : kind_(kind), bytes_(bytes), data_(data), live_(std::move(live)) {
    live_->bytes[static_cast<int>(kind_)] += bytes_;
  }
  void check_range(size_t off, size_t n, const char* what) const;

 private:
  BufferKind kind_;
  size_t bytes_;
  uint8_t* data_;
  std::shared_ptr<LiveBytes> live_;
};

class Backend;

// A weight vector in backend memory (norm weights, biases, conv taps, decay constants), f32, read-only.
class Floats {
 public:
  Floats() = default;
  Floats(Backend& be, const std::vector<float>& host);
  const float* data() const { return buf_ ? buf_->as<float>() : nullptr; }
  int64_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  std::vector<float> to_host() const;  // a copy (tests, dumps)

 private:
  std::shared_ptr<Buffer> buf_;  // shared: weight structs are copied (expert views, layer tables)
  int64_t n_ = 0;
};

// Forward scratch: a growable backend buffer (kScratch). Grows, never shrinks, so steady-state decode does not
// allocate; contents are not kept across growth.
class Scratch {
 public:
  template <typename T>
  T* grow(Backend& be, int64_t n) {
    return reinterpret_cast<T*>(grow_bytes(be, static_cast<size_t>(n) * sizeof(T)));
  }
  size_t bytes() const { return buf_ ? buf_->bytes() : 0; }
  void read(void* dst, size_t n) const { buf_->read(0, dst, n); }  // the first n bytes, to the host
  // Grows to n bytes and fills them from the host; returns the device pointer.
  template <typename T>
  T* upload(Backend& be, const T* src, int64_t n) {
    T* p = grow<T>(be, n);
    buf_->write(0, src, static_cast<size_t>(n) * sizeof(T));
    return p;
  }

 private:
  uint8_t* grow_bytes(Backend& be, size_t n);
  std::unique_ptr<Buffer> buf_;
};

// Host-side bookkeeping vectors (positions, routing groups, a backend's own workspace): grow, never shrink.
template <typename T>
T* grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// One SwiGLU FFN over a set of a batch's rows: a routed expert (its tokens) or a shared expert (all rows).
struct FfnJob {
  Matrix gate, up, down;            // gate, up: {n_in, F}; down: {F, D}
  const int32_t* tokens = nullptr;  // [m] batch rows (host memory), or nullptr for rows 0..m-1
  int64_t m = 0;
  int64_t out_off = 0;              // first row of this job's output in `out`
};

using FfnMid = std::function<const float*(const float* h, int64_t h_rows, int64_t F, int64_t* F_down)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu (avx2)"

  // ---- memory
  virtual std::unique_ptr<Buffer> alloc(BufferKind kind, size_t bytes) = 0;  // zeroed; throws Error when out of memory
  // Weights as the backend reads them: host bytes that stay valid for the model's life (the mapped file). The CPU
  // reads them in place (zero copy); a device backend would upload them and return device memory it owns.
  virtual const uint8_t* map_weights(const uint8_t* host, size_t bytes) = 0;
  // Bytes of each kind allocated through alloc() and not yet freed (buffers may outlive the backend).
  uint64_t live_bytes(BufferKind kind) const { return live_->bytes[static_cast<int>(kind)]; }

  // ---- weight layout
  virtual bool has_kernels(quant::Type t) const = 0;     // matrices of type t can be multiplied
  virtual bool can_repack(const Matrix& w) const = 0;     // the backend has a kernel layout for w's type
  virtual size_t repacked_bytes(const Matrix& w) const = 0;
  // w repacked into dst (repacked_bytes(w) bytes of backend memory): the same matrix as a repacked view.
  // `parallel`: over the backend's threads (model load); else on the calling thread (an expert read into a slot).
  virtual Matrix repack_into(const Matrix& w, uint8_t* dst, bool parallel) = 0;

  // ---- matrices
  // y [n_tok, n_out] = x [n_tok, n_in] W^T.
  virtual void matmul(const Matrix& w, const float* x, int64_t n_tok, float* y) = 0;
  // out[n_tok, D] rows = table rows ids[t] (embedding lookup; ids in host memory, checked by the caller).
  virtual void get_rows(const Matrix& table, const int32_t* ids, int64_t n_tok, float* out) = 0;
  // Every job's down(silu(gate x) * up x) over its rows of x [n_rows, n_in], job j's row r into
  // out[(out_off + r) * D ..]. Each output row depends only on its own input row and the job's matrices.
  // `same_x`: x holds the same rows as in the previous call (what the backend prepared from them may be reused:
  // the experts of one layer streamed one at a time).
  // `mid` (tensor-parallel experts, optional): the jobs' gate/up hold a share of each expert's rows, down all of its
  // inputs. Between the halves, mid(h, h_rows, F, &F_down) gets the SwiGLU rows h [h_rows, F] (F: the jobs' common
  // gate width) and returns the rows down reads, [h_rows, F_down] (every rank's columns gathered).
  virtual void swiglu_ffns(const std::vector<FfnJob>& jobs, const float* x, int64_t n_rows, int64_t D, float* out,
                           bool same_x, const FfnMid& mid = {}) = 0;

  // ---- norms and elementwise
  virtual void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) = 0;
  virtual void rms_norm_gated(const float* x, const float* z, const float* w, float* y, int64_t n_rows, int64_t n,
                              float eps) = 0;
  virtual void add(float* x, const float* y, int64_t n) = 0;  // x += y
  virtual void swiglu(float* g, const float* u, int64_t n) = 0;  // g = silu(g) * u
  // y[t] += sigmoid(gate[t]) * s[t] for rows t of D (a gated shared expert).
  virtual void add_gated_rows(float* y, const float* s, const float* gate, int64_t n_rows, int64_t D) = 0;
  // rows_out[i] = x[rows[i]] for n rows of D (rows in host memory).
  virtual void gather_rows(const float* x, const int64_t* rows, int64_t n, int64_t D, float* rows_out) = 0;
  // dst = src, n bytes, both in this backend's memory.
  virtual void copy(void* dst, const void* src, size_t n) = 0;
  // out[r] = [a[r] (da values) | b[r] (db values)] for n_rows rows.
  virtual void concat_rows(const float* a, int64_t da, const float* b, int64_t db, int64_t n_rows, float* out) = 0;
  // dst[r * dst_stride + i] = src[r * src_stride + i] for n values of n_rows rows (splitting heads, strided views).
  virtual void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t n_rows,
                         int64_t n) = 0;
  virtual void scale(float* x, float s, int64_t n) = 0;  // x *= s

  // ---- attention
  virtual void split_q_gate(const float* qg, int64_t n_tok, int64_t n_head, int64_t head_dim, float* q,
                            float* gate) = 0;
  virtual void rope_neox(float* x, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot,
                         const int32_t* pos, float freq_base) = 0;
  virtual void kv_store(const ops::KvCacheView& kv, const float* k, const float* v, int64_t n_tok, int64_t pos0) = 0;
  virtual void attention_causal(const float* q, int64_t n_tok, int64_t n_head, const ops::KvCacheView& kv,
                                int64_t pos0, float scale, float* out) = 0;
  virtual void sigmoid_gate(float* o, const float* gate, int64_t n) = 0;  // o *= sigmoid(gate)

  // ---- multi-head latent attention with the sparse-attention indexer (ops/mla.h)
  virtual void rope_interleaved(float* x, int64_t n_tok, int64_t n_head, int64_t head_stride, int64_t off,
                                int64_t n_rot, const int32_t* pos, float freq_base) = 0;
  virtual void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n_rows, int64_t n,
                          float eps) = 0;
  virtual void rows_store(void* cache, ops::KvType type, int64_t n_ctx, int64_t dim, const float* x, int64_t n_tok,
                          int64_t pos0) = 0;
  // sel [n_tok, topk] and n_sel [n_tok] land in host memory (like moe_route's ids).
  virtual void indexer_topk(const float* q, const float* w, int64_t n_tok, int64_t n_head, int64_t dim, const void* k,
                            ops::KvType type, int64_t n_ctx, int64_t pos0, int64_t topk, int32_t* sel,
                            int32_t* n_sel) = 0;
  // sel, n_sel: host memory (null: every causal key).
  virtual void attention_mla(const float* q, int64_t n_tok, int64_t n_head, const void* kv, ops::KvType type,
                             int64_t n_ctx, int64_t dk, int64_t dv, int64_t pos0, const int32_t* sel,
                             int64_t sel_stride, const int32_t* n_sel, float scale, float* out) = 0;
  virtual void rows_load(const void* cache, ops::KvType type, int64_t n_ctx, int64_t dim, int64_t pos0,
                         int64_t n_rows, float* out) = 0;
  // The plain form over per-head keys k [n_head, n_ctx, dk] and values v [n_head, n_ctx, dv] (ops/mla.h).
  virtual void attention_mla_expanded(const float* q, int64_t q_stride, int64_t n_tok, int64_t n_head, const float* k,
                                      const float* v, int64_t n_ctx, int64_t dk, int64_t dv, int64_t pos0, float scale,
                                      float* out, int64_t out_stride) = 0;

  // ---- gated DeltaNet
  // beta = sigmoid(beta); g = a * softplus(g + dt_bias), both [n_rows, n_heads].
  virtual void delta_gates(float* beta, float* g, const float* a, const float* dt_bias, int64_t n_rows,
                           int64_t n_heads) = 0;
  // ba [n_rows, n_k_heads, 2, r] (per key head its r beta values, then its r alpha values) -> beta, g
  // [n_rows, n_k_heads * r].
  virtual void split_ba(const float* ba, int64_t n_rows, int64_t n_k_heads, int64_t r, float* beta, float* g) = 0;
  virtual void conv1d_causal_silu(const float* x, int64_t n_tok, int64_t n_ch, int64_t kernel, const float* w,
                                  float* state, float* y) = 0;
  virtual void l2_norm(const float* x, float* y, int64_t n_rows, int64_t n, float eps) = 0;
  // The gated delta rule over one sequence; `grouped`: value head p pairs with key head p / (Hv / Hk) (qwen3next),
  // else p % Hk (tiled: qwen35/qwen35moe GGUFs). The recurrent state is in the inputs' value-head order.
  virtual void gated_delta_rule(const ops::DeltaRuleShape& shape, const ops::DeltaRuleInputs& in, bool grouped,
                                float* state, float* out) = 0;

  // ---- MoE
  // ids and weights [n_rows, n_used] land in host memory (the blocks group tokens by expert on the host).
  virtual void moe_route(const float* logits, int64_t n_rows, int64_t n_expert, int64_t n_used,
                         const ops::RouteParams& p, int32_t* ids, float* weights) = 0;
  // y[t] = sum_k weights[t, k] * out[slot_row[t * K + k]] in k order, rows of D (slot_row, weights: host).
  virtual void moe_combine(const float* out, const int32_t* slot_row, const float* weights, int64_t n_rows,
                           int64_t K, int64_t D, float* y) = 0;

  virtual void sync() = 0;  // waits for queued work (a no-op on the CPU)

 protected:
  std::shared_ptr<LiveBytes> live_ = std::make_shared<LiveBytes>();  // handed to every Buffer alloc() makes
};

// The backends this build has, by name ("cpu"). Throws Error naming the known ones for any other name.
std::unique_ptr<Backend> make_backend(const std::string& name = "cpu");
std::vector<std::string> backend_names();

}  // namespace tern::backend
