// A small fork-join pool for host work of every backend (the CPU layers, weight preparation).
//
// parallel_for(n, task) runs task(0..n-1) on the pool's workers and the calling thread and
// returns when all have finished. Tasks are handed out in increasing order; after a task throws
// no new task starts, and the exception of the lowest failing task is rethrown, so the error a
// caller sees does not depend on the thread count. Several threads may call parallel_for at
// once (simulated EP ranks do); their jobs share the workers. Tasks must not depend on which
// thread runs them: results are then identical for every thread count (each task writes its
// own outputs and keeps scratch data in thread_local buffers).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace moe_ep {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // num_threads >= 1 counts the calling thread
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  // The lowest failing task's exception is rethrown here after all started tasks have stopped.
  void parallel_for(int64_t num_tasks, const std::function<void(int64_t)>& task);

 private:
  struct Job;
  void worker_loop();
  static void run_tasks(Job& job);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

inline constexpr int kMaxThreads = 4096;
// `requested` when >= 1 (KernelOverrides::num_threads), else the hardware threads; throws
// kInvalidArgument outside 0..kMaxThreads.
int resolve_num_threads(int requested);

// Runs task(0..n-1) on the pool (the ParallelFor of core/weight_prep.h).
using ParallelFor = std::function<void(int64_t num_tasks, const std::function<void(int64_t)>& task)>;
ParallelFor parallel_for_of(ThreadPool& pool);

// A process-wide pool per thread count, created on first use and kept while referenced.
std::shared_ptr<ThreadPool> shared_thread_pool(int num_threads);

}  // namespace moe_ep
