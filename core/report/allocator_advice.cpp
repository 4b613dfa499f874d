#include "core/report/allocator_advice.h"

namespace poolscope {

std::string allocatorAdvice(const MomentEvidence&)
{
    return "the allocator holds memory it cannot hand out for this request; set "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or max_split_size_mb)";
}

} // namespace poolscope
