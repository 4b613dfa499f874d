// libFuzzer harness. The pickle VM alone: any bytes decode into a value tree or throw LoadError; nothing else.
// The work is in fuzz_targets.h, shared with the regression test that replays checked-in findings.
#include "fuzz_targets.h"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string problem = poolscope::fuzz::runTarget("fuzz_pickle", {data, size});
    if (!problem.empty()) {
        std::fprintf(stderr, "invariant violated: %s\n", problem.c_str());
        std::abort();
    }
    return 0;
}
