#pragma once
#include <exception>
#include <thread>

namespace poolscope {

// Runs `here` on this thread and `there` on a second one, and returns when both are done: the split
// the level of detail, the pool series and the stack fill use for their two halves. Whichever throws,
// the second thread is joined first (a joinable std::thread destroyed while unwinding would end the
// program), and the exception leaves from here; `here`'s wins when both throw.
template <typename Here, typename There>
void onTwoThreads(Here&& here, There&& there)
{
    std::exception_ptr thereError;
    std::thread second([&] {
        try {
            there();
        } catch (...) {
            thereError = std::current_exception();
        }
    });
    try {
        here();
    } catch (...) {
        second.join();
        throw;
    }
    second.join();
    if (thereError)
        std::rethrow_exception(thereError);
}

} // namespace poolscope
