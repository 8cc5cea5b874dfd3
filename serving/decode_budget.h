// The daemon's image decode budget (limits.decode_budget_bytes, docs/daemon.md "Decode budget"): the bytes
// all image decodes in flight may hold together. A request acquires its image's peak decode bytes
// (runtime/inputs.h image_decode_bytes) before decoding and releases them after; requests that do not fit
// wait in arrival order until a deadline. Waiting requests hold no decode memory, so the daemon's decode
// memory never exceeds the budget however many connections send images at once.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>

namespace edgevit::daemon {

class DecodeBudget {
 public:
  using Clock = std::chrono::steady_clock;

  explicit DecodeBudget(int64_t capacity_bytes) : capacity_(capacity_bytes) {}
  DecodeBudget(const DecodeBudget&) = delete;
  DecodeBudget& operator=(const DecodeBudget&) = delete;

  int64_t capacity() const { return capacity_; }

  // Waits until `bytes` fit and every earlier waiter has been served, at most until `deadline` (a
  // deadline in the past: only an immediate fit). Gives up early when `stopping` becomes true (checked every
  // `slice`). bytes must be <= capacity(). True: the bytes are held until release(bytes).
  bool acquire(int64_t bytes, Clock::time_point deadline, const std::atomic<bool>& stopping,
               std::chrono::milliseconds slice = std::chrono::milliseconds(50)) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t ticket = next_ticket_++;
    queue_.push_back(ticket);
    bool waited = false;
    for (;;) {
      if (queue_.front() == ticket && in_use_ + bytes <= capacity_) {
        queue_.pop_front();
        in_use_ += bytes;
        peak_ = std::max(peak_, in_use_);
        ++granted_;
        cv_.notify_all();  // the next waiter may fit too
        return true;
      }
      const auto now = Clock::now();
      if (now >= deadline || stopping.load()) {
        queue_.erase(std::find(queue_.begin(), queue_.end(), ticket));
        ++timed_out_;
        cv_.notify_all();  // a waiter behind this one may be at the front now
        return false;
      }
      if (!waited) ++waited_;
      waited = true;
      cv_.wait_until(lock, std::min(deadline, now + slice));
    }
  }

  void release(int64_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_use_ -= bytes;
    }
    cv_.notify_all();
  }

  struct Stats {
    int64_t capacity = 0, in_use = 0, peak = 0;
    uint64_t granted = 0, waited = 0, timed_out = 0, waiting = 0;  // waited: acquires that had to wait
  };
  Stats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {capacity_, in_use_, peak_, granted_, waited_, timed_out_, static_cast<uint64_t>(queue_.size())};
  }

 private:
  const int64_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<uint64_t> queue_;  // tickets of the waiting requests, in arrival order
  uint64_t next_ticket_ = 0;
  int64_t in_use_ = 0, peak_ = 0;
  uint64_t granted_ = 0, waited_ = 0, timed_out_ = 0;
};

}  // namespace edgevit::daemon
