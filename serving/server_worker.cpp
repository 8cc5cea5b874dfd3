// edgevitd: the inference worker: dynamic batches from the request queue, answers written into the slots.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>

#include <spdlog/spdlog.h>

#include "runtime/host_info.h"
#include "runtime/inputs.h"
#include "runtime/topk.h"
#include "serving/server_impl.h"

namespace edgevit::daemon {

// ---- request preparation and queue ------------------------------------------------------------

// Validates the request against model `m` (protocol::parse_payload) and fills s->input (n images). Tensor
// requests allocate nothing; image requests allocate inside the decoder, within the decode budget.
bool Server::Impl::prepare(Slot* s, const std::shared_ptr<Model>& m, ErrorInfo* err, Clock::time_point budget_deadline) {
  const VitArch& a = m->spec.arch;
  protocol::ModelInput input;
  input.name = m->spec.name;
  input.in_chans = static_cast<uint32_t>(a.in_chans);
  input.img_h = static_cast<uint32_t>(a.img_h);
  input.img_w = static_cast<uint32_t>(a.img_w);
  input.max_batch = static_cast<uint32_t>(m->batch);
  protocol::ParsedRequest r;
  protocol::ParseError perr;
  if (!protocol::parse_payload(s->req, s->in.get() + protocol::kHeaderBytes, s->req.payload_bytes, input, &r,
                               &perr)) {
    err->code = perr.code;
    err->message = perr.message;
    return false;
  }
  s->topk = std::min(r.topk == 0 ? config.default_topk : static_cast<int>(r.topk), m->out_dim);
  s->want_logits = r.want_logits;
  s->want_embedding = r.want_embedding;
  s->want_tokens = r.want_tokens;
  for (const OutputKind k : {OutputKind::kEmbedding, OutputKind::kTokens}) {
    if (!(k == OutputKind::kEmbedding ? r.want_embedding : r.want_tokens)) continue;
    if (m->engine && m->engine->outputs().has(k)) continue;
    err->code = ErrorCode::kNoSuchOutput;
    err->message = "model " + m->spec.name + " does not produce the output '" + to_string(k) + "'" +
                   (k == OutputKind::kTokens ? " (list tokens in the model config's runtime.outputs to serve it)" : "");
    return false;
  }
  s->model = m;
  const size_t need = static_cast<size_t>(m->per_image) * m->batch;
  if (s->input.size() < need) s->input.resize(need);
  if (s->order.size() < static_cast<size_t>(m->out_dim)) s->order.resize(m->out_dim);
  if (r.op == Op::kInferImage) {
    const Status st = decode_within_budget(r.image, r.image_bytes, *m, s->input.data(), err, budget_deadline);
    if (!st.ok()) return false;
  } else {
    std::memcpy(s->input.data(), r.tensor, r.tensor_bytes);  // r.n <= m->batch images
  }
  s->n = static_cast<int>(r.n);
  ensure_out_capacity(s, *m, s->n);
  return true;
}

// Decodes one image holding its peak decode bytes (image_decode_bytes, from the header) of the shared
// budget: an image above the whole budget is bad_image; no share by `budget_deadline` is busy.
Status Server::Impl::decode_within_budget(const uint8_t* image, size_t size, const Model& m, float* dst,
                                          ErrorInfo* err, Clock::time_point budget_deadline) {
  auto refuse = [&](ErrorCode code, const std::string& message) {
    *err = {code, message};
    return input_error(message);
  };
  const Result<int64_t> bytes = image_decode_bytes(image, size, "request image", m.spec);
  if (!bytes.ok()) return refuse(ErrorCode::kBadImage, bytes.status().message());
  if (*bytes > decode_budget->capacity())
    return refuse(ErrorCode::kBadImage, "request image: decoding needs " + std::to_string(*bytes) +
                                            " bytes, above limits.decode_budget_bytes " +
                                            std::to_string(decode_budget->capacity()));
  if (!decode_budget->acquire(*bytes, budget_deadline, stopping))
    return refuse(ErrorCode::kBusy, "request image: no decode budget free within limits.decode_wait_ms " +
                                        std::to_string(config.decode_wait_ms) + " (" + std::to_string(*bytes) +
                                        " bytes wanted of " + std::to_string(decode_budget->capacity()) + ")");
  ImageLimits limits;
  limits.max_decode_bytes = decode_budget->capacity();
  Status st;
  try {
    st = decode_image(image, size, "request image", m.spec, dst, limits);
  } catch (...) {
    decode_budget->release(*bytes);
    throw;
  }
  decode_budget->release(*bytes);
  if (!st.ok()) return refuse(ErrorCode::kBadImage, st.message());
  return Status::Ok();
}

void Server::Impl::ensure_out_capacity(Slot* s, const Model& m, int n) {
  const size_t k = static_cast<size_t>(std::min(m.out_dim, static_cast<int>(protocol::kMaxTopk)));
  // Room for every output section the engine can answer (their headers fit in the 1024 bytes below), whether
  // or not this request wants them: sized once at start-up, a request never grows the buffer.
  size_t sections = 0;
  if (m.engine)
    for (const OutputKind k : {OutputKind::kEmbedding, OutputKind::kTokens})
      sections += static_cast<size_t>(m.engine->output_numel_per_image(k));
  const size_t need = protocol::kHeaderBytes + protocol::kInferAnswerFixedBytes +
                      static_cast<size_t>(n) * k * (12 + protocol::kMaxLabelBytes) +
                      static_cast<size_t>(n) * (m.out_dim + sections) * sizeof(float) + 8 + 1024;
  if (s->out.size() < need) s->out.resize(need);
}

bool Server::Impl::enqueue(Slot* s) {
  {
    std::lock_guard<std::mutex> lock(q_mu);
    --preparing;
    if (ring_count == ring.size()) return false;
    s->done = false;
    ring[(ring_head + ring_count) % ring.size()] = s;
    ++ring_count;
  }
  q_cv.notify_one();
  return true;
}

void Server::Impl::wait_done(Slot* s) {
  std::unique_lock<std::mutex> lock(s->mu);
  s->cv.wait(lock, [&] { return s->done; });
}


// ---- worker ----------------------------------------------------------------------------------------

void Server::Impl::worker_loop() {
  uint64_t batches_done = 0;
  // OpenMP's thread count is per calling thread (Engine::create set it in the thread that made the
  // engine): set it here too, or every parallel region of this thread uses all cores.
  if (model && model->engine) set_host_threads(model->engine->threads());
  for (;;) {
    heartbeat.fetch_add(1, std::memory_order_relaxed);
    last_progress = Clock::now().time_since_epoch().count();
    std::shared_ptr<Model> m;
    size_t count = 0;
    {
      std::unique_lock<std::mutex> lock(q_mu);
      q_cv.wait_for(lock, std::chrono::milliseconds(tick_ms),
                    [&] { return ring_count > 0 || worker_stop || pending_swap || pending_replace; });
      if (pending_swap) {
        std::lock_guard<std::mutex> ml(model_mu);
        model = std::move(pending_swap);
        pending_swap.reset();
        set_host_threads(model->engine->threads());
        swap_cv.notify_all();
      }
      if (pending_replace) {
        auto task = std::move(pending_replace);
        pending_replace = nullptr;
        lock.unlock();
        task();
        swap_cv.notify_all();
        continue;
      }
      if (ring_count == 0) {
        if (worker_stop) {
          worker_done = true;
          swap_cv.notify_all();
          return;
        }
        continue;
      }
      m = current_model();
      // Dynamic batching: take queued requests while they fit; wait up to max_wait_us for more only while
      // other connections are in the middle of sending one.
      const int cap = m->batch;
      int images = 0;
      const auto deadline = Clock::now() + std::chrono::microseconds(config.max_wait_us);
      for (;;) {
        while (ring_count > 0 && count < batch_slots.size() && images + ring[ring_head]->n <= cap) {
          Slot* s = ring[ring_head];
          ring_head = (ring_head + 1) % ring.size();
          --ring_count;
          images += s->n;
          batch_slots[count++] = s;
        }
        if (images >= cap || ring_count > 0 || count == batch_slots.size()) break;
        if (config.max_wait_us == 0 || preparing.load() == 0 || Clock::now() >= deadline) break;
        q_cv.wait_until(lock, deadline);
      }
    }
    if (options.test_hang_after_batches >= 0 && batches_done >= static_cast<uint64_t>(options.test_hang_after_batches)) {
      spdlog::warn("test hang: the worker stops making progress (EDGEVITD_TEST_HANG_AFTER)");
      std::unique_lock<std::mutex> lock(hang_mu);
      hang_cv.wait(lock, [&] { return stopping.load(); });
    }
    run_batch(m, count);
    ++batches_done;
  }
}

// Answers one slot with an error (the worker's side of answer_error: the slot thread sends it).
void Server::Impl::fail_slot(Slot* s, ErrorCode code, const std::string& message) {
  ++errors[static_cast<int>(code)];
  log_request_error(s, code, message);
  encode_error(s, code, message);
  finish_slot(s);
}

// Copies the inputs of batch_slots[0, count) into the model's batch buffer; inputs prepared for an older
// model are prepared again for this one (after a reload); those that no longer fit are answered. Returns
// the number of slots kept (compacted to the front of batch_slots); *images: their images.
size_t Server::Impl::gather_batch(const std::shared_ptr<Model>& m, size_t count, int* images) {
  size_t ready = 0;
  *images = 0;
  for (size_t i = 0; i < count; ++i) {
    Slot* s = batch_slots[i];
    if (s->model != m) {
      ErrorInfo err;
      bool ok = false;
      try {
        ok = m->engine && prepare(s, m, &err, Clock::now()) && *images + s->n <= m->batch;
      } catch (const std::exception& e) {
        ++handler_exceptions;
        err = {ErrorCode::kInternal, std::string("could not prepare the input: ") + e.what()};
      }
      if (!ok) {
        if (!m->engine) err = {ErrorCode::kInternal, "no model loaded (a reload failed and its rollback failed)"};
        else if (err.message.empty()) err = {ErrorCode::kBusy, "model changed; retry"};
        fail_slot(s, err.code, err.message);
        continue;
      }
    }
    std::memcpy(m->batch_input.data() + static_cast<size_t>(*images) * m->per_image, s->input.data(),
                static_cast<size_t>(s->n) * m->per_image * sizeof(float));
    *images += s->n;
    batch_slots[ready++] = s;
  }
  return ready;
}

// Runs `images` images of the batch buffer and answers batch_slots[first, first + count), whose inputs
// lie there in order. A non-finite output is answered as `non_finite_output`, never as a prediction: the
// daemon checks every row it answers (whether or not the engine checks), and when the engine refuses a
// batch of several requests each request runs again alone, so one bad input fails only its own request.
void Server::Impl::infer_and_answer(const std::shared_ptr<Model>& m, size_t first, size_t count, int images) {
  const auto t0 = Clock::now();
  const Status st = m->engine ? m->engine->infer(m->batch_input.data(), images)
                              : Status(StatusCode::kInternal, "no model loaded");
  const uint64_t infer_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  infer_latency.add(infer_ns);
  ++batches;
  if (st.code() == StatusCode::kNonFinite && count > 1) {
    for (size_t i = first; i < first + count; ++i) {
      Slot* s = batch_slots[i];
      std::memcpy(m->batch_input.data(), s->input.data(), static_cast<size_t>(s->n) * m->per_image * sizeof(float));
      infer_and_answer(m, i, 1, s->n);
    }
    return;
  }
  int row = 0;
  for (size_t i = first; i < first + count; ++i) {
    Slot* s = batch_slots[i];
    const float* rows = st.ok() ? m->engine->logits() + static_cast<size_t>(row) * m->out_dim : nullptr;
    const size_t values = static_cast<size_t>(s->n) * m->out_dim;
    if (!st.ok()) {
      fail_slot(s, st.code() == StatusCode::kNonFinite ? ErrorCode::kNonFinite : ErrorCode::kInternal, st.message());
    } else if (std::any_of(rows, rows + values, [](float v) { return !std::isfinite(v); })) {
      fail_slot(s, ErrorCode::kNonFinite,
                m->spec.name + ": the output holds NaN or Inf for this input (no prediction is given)");
    } else {
      answer_slot(s, *m, rows, row, images, infer_ns);
    }
    row += s->n;
  }
}

void Server::Impl::run_batch(const std::shared_ptr<Model>& m, size_t count) {
  in_inference = true;
  int images = 0;
  const size_t ready = gather_batch(m, count, &images);
  if (ready > 0) infer_and_answer(m, 0, ready, images);
  in_inference = false;
}

// One named output section (protocol.h) at w: output `k` of images [row, row + n) of the engine's last batch.
// Returns the end of what it wrote.
static uint8_t* write_section(uint8_t* w, const Engine& e, OutputKind k, int row, int n) {
  const char* name = to_string(k);
  const size_t len = std::strlen(name);
  protocol::put_u32(w, static_cast<uint32_t>(len));
  w += 4;
  const size_t padded = (len + 3u) & ~size_t{3};
  std::memset(w, 0, padded);
  std::memcpy(w, name, len);
  w += padded;
  // The tensor's shape in the plan (batch first): read in place, so answering allocates nothing.
  const Graph& g = e.plan().graph;
  const std::vector<int64_t>& shape = g.tensors[static_cast<size_t>(output_tensor(g, k))].shape;
  protocol::put_u32(w, static_cast<uint32_t>(shape.size() - 1));
  w += 4;
  for (size_t i = 1; i < shape.size(); ++i) {
    protocol::put_u32(w, static_cast<uint32_t>(shape[i]));
    w += 4;
  }
  const int64_t per = e.output_numel_per_image(k);
  const size_t bytes = static_cast<size_t>(per * n) * sizeof(float);
  std::memcpy(w, e.output(k) + per * row, bytes);
  return w + bytes;
}

// Writes the infer answer of slot `s` (its rows of logits, `rows`, at `row` of a batch of `images`).
void Server::Impl::answer_slot(Slot* s, const Model& m, const float* rows, int row, int images, uint64_t infer_ns) {
  const int k = s->topk;
  const int od = m.out_dim;
  uint8_t* o = s->out.data() + protocol::kHeaderBytes;
  protocol::put_u32(o, static_cast<uint32_t>(s->n));
  protocol::put_u32(o + 4, static_cast<uint32_t>(k));
  protocol::put_u32(o + 8, s->want_logits ? static_cast<uint32_t>(od) : 0u);
  protocol::put_u32(o + 12, static_cast<uint32_t>((s->want_embedding ? 1 : 0) + (s->want_tokens ? 1 : 0)));
  protocol::put_u64(o + 24, infer_ns);
  protocol::put_u32(o + 32, static_cast<uint32_t>(images));
  protocol::put_u32(o + 36, static_cast<uint32_t>(row));
  uint8_t* w = o + protocol::kInferAnswerFixedBytes;
  for (int img = 0; img < s->n; ++img) {
    const float* r = rows + static_cast<size_t>(img) * od;
    const float mx = *std::max_element(r, r + od);
    double sum = 0;
    for (int c = 0; c < od; ++c) sum += std::exp(static_cast<double>(r[c]) - mx);
    top_k_order(r, od, k, s->order.data());  // s->order: od ints, sized at start-up (allocates nothing)
    for (int j = 0; j < k; ++j) {
      const int c = s->order[j];
      const float score = static_cast<float>(std::exp(static_cast<double>(r[c]) - mx) / sum);
      // Labels were made valid UTF-8 and cut on a character boundary at load (load_model).
      const std::string* label = c < static_cast<int>(m.labels.size()) ? &m.labels[c] : nullptr;
      const uint32_t len = label ? static_cast<uint32_t>(std::min(label->size(), protocol::kMaxLabelBytes)) : 0u;
      protocol::put_u32(w, static_cast<uint32_t>(c));
      protocol::put_f32(w + 4, score);
      protocol::put_u32(w + 8, len);
      w += 12;
      if (len > 0) std::memcpy(w, label->data(), len);
      const uint32_t padded = (len + 3u) & ~3u;
      std::memset(w + len, 0, padded - len);
      w += padded;
    }
  }
  if (s->want_logits) {
    const size_t bytes = static_cast<size_t>(s->n) * od * sizeof(float);
    std::memcpy(w, rows, bytes);
    w += bytes;
  }
  if (s->want_embedding) w = write_section(w, *m.engine, OutputKind::kEmbedding, row, s->n);
  if (s->want_tokens) w = write_section(w, *m.engine, OutputKind::kTokens, row, s->n);
  const uint64_t lat = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s->received).count();
  protocol::put_u64(o + 16, lat);
  latency.add(lat);
  protocol::Header h;
  h.op = s->req.op;
  h.flags = protocol::kFlagResponse;
  h.payload_bytes = static_cast<uint32_t>(w - o);
  h.request_id = s->req.request_id;
  protocol::encode_header(h, s->out.data());
  s->out_bytes = static_cast<size_t>(w - s->out.data());
  ++requests_ok;
  images_ok += s->n;
  finish_slot(s);
}

void Server::Impl::finish_slot(Slot* s) {
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->model.reset();
    s->done = true;
  }
  s->cv.notify_all();
}

}  // namespace edgevit::daemon
