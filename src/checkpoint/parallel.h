// Multithreaded loops of the checkpoint loaders.
#pragma once

#include <cstdint>
#include <functional>

namespace moe_ep::checkpoint {

int resolve_num_threads(int requested);  // 0: hardware threads

// Runs task(0..num_tasks-1) on up to num_threads threads, tasks taken in increasing order. When
// tasks throw, no new task starts and the exception of the lowest failing task is rethrown,
// so the error a user sees does not depend on the thread count.
void parallel_tasks(int64_t num_tasks, int num_threads, const std::function<void(int64_t)>& task);

}  // namespace moe_ep::checkpoint
