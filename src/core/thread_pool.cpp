#include "core/thread_pool.h"

#include <atomic>
#include <cstdlib>
#include <exception>
#include <algorithm>
#include <map>

#include "core/check.h"

namespace moe_ep {

struct ThreadPool::Job {
  const std::function<void(int64_t)>* task = nullptr;
  int64_t num_tasks = 0;
  std::atomic<int64_t> next{0};      // next task index to hand out
  std::atomic<int64_t> finished{0};  // tasks done (or abandoned after an error)
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::condition_variable done;
  std::exception_ptr error;          // of task first_failed
  int64_t first_failed = 0;
};

ThreadPool::ThreadPool(int num_threads) {
  MOE_EP_CHECK(num_threads >= 1, "thread count {} is invalid; expected >= 1", num_threads);
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

// Every task handed out runs (all tasks below a failing one were handed out before it); after
// a failure the tasks not yet handed out are claimed at once and counted as done.
void ThreadPool::run_tasks(Job& job) {
  int64_t done_here = 0;
  for (;;) {
    if (job.failed.load()) {
      const int64_t rest = job.next.exchange(job.num_tasks);
      if (rest < job.num_tasks) done_here += job.num_tasks - rest;
      break;
    }
    const int64_t i = job.next.fetch_add(1);
    if (i >= job.num_tasks) break;
    try {
      (*job.task)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.mutex);
      if (!job.error || i < job.first_failed) {
        job.error = std::current_exception();
        job.first_failed = i;
      }
      job.failed = true;
    }
    ++done_here;
  }
  if (done_here > 0 && job.finished.fetch_add(done_here) + done_here == job.num_tasks) {
    std::lock_guard<std::mutex> lock(job.mutex);
    job.done.notify_all();
  }
}

void ThreadPool::worker_loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        while (!jobs_.empty() && jobs_.front()->next.load() >= jobs_.front()->num_tasks)
          jobs_.pop_front();  // fully handed out
        return stopping_ || !jobs_.empty();
      });
      if (stopping_) return;
      job = jobs_.front();
    }
    run_tasks(*job);
  }
}

void ThreadPool::parallel_for(int64_t num_tasks, const std::function<void(int64_t)>& task) {
  if (num_tasks <= 0) return;
  if (workers_.empty() || num_tasks == 1) {
    for (int64_t i = 0; i < num_tasks; ++i) task(i);
    return;
  }
  auto job = std::make_shared<Job>();
  job->task = &task;
  job->num_tasks = num_tasks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(job);
  }
  wake_.notify_all();
  run_tasks(*job);
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(job->mutex);
    job->done.wait(lock, [&] { return job->finished.load() == job->num_tasks; });
    error = std::move(job->error);
  }
  // The caller owns the exception alone: a worker still holding the job must not release it.
  if (error) std::rethrow_exception(error);
}

int resolve_num_threads(int requested) {
  MOE_EP_CHECK(requested >= 0 && requested <= kMaxThreads,
               "num_threads = {} is invalid; expected 1..{} (or 0: every hardware thread)",
               requested, kMaxThreads);
  if (requested > 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(std::min<unsigned>(hw, kMaxThreads));
}

ParallelFor parallel_for_of(ThreadPool& pool) {
  return [&pool](int64_t n, const std::function<void(int64_t)>& task) { pool.parallel_for(n, task); };
}

std::shared_ptr<ThreadPool> shared_thread_pool(int num_threads) {
  static std::mutex mutex;
  static std::map<int, std::weak_ptr<ThreadPool>> pools;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto pool = pools[num_threads].lock()) return pool;
  auto pool = std::make_shared<ThreadPool>(num_threads);
  pools[num_threads] = pool;
  return pool;
}

}  // namespace moe_ep
