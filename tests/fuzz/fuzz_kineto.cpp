// libFuzzer harness. Kineto / Chrome trace JSON through readKinetoTrace and the model build.
// The work is in fuzz_targets.h, shared with the regression test that replays checked-in findings.
#include "fuzz_targets.h"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string problem = poolscope::fuzz::runTarget("fuzz_kineto", {data, size});
    if (!problem.empty()) {
        std::fprintf(stderr, "invariant violated: %s\n", problem.c_str());
        std::abort();
    }
    return 0;
}
