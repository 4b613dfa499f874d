#pragma once
// Private to core/classify: cuBLASLt's workspace made for each call, without the frames that name it.
#include "core/classify/classifier.h"

namespace poolscope::classify_detail {

// PyTorch 2.0 to 2.4 give each cuBLASLt call (gemm_and_bias: a linear layer with a bias; the Lt
// gemms) a workspace of CUBLASLT_WORKSPACE_SIZE, 1 MiB by default, allocated in the call and let go
// of when it returns; later versions keep one per handle (workspaceBySize). With C++ frames the
// cublas-workspace rule names it, so this reads only dumps that recorded no C++ frame. With Python
// frames only, the forward's show the layer's call and the backward's nothing (the autograd engine's
// thread); frameless, nothing: the lifetime rules call them scratch. A block of exactly that size,
// made inside a forward or backward pass and let go of before any other block is made (the first
// call on a handle may make the handle's own workspace meanwhile), four times or more in the run, is
// that workspace (60 %): an operator's output lives until the next operator has made its own. Not
// where a parameter has that size (an optimizer's update makes and drops temporaries of its size).
void perCallMatmulWorkspace(const Trace& trace, const DeviceTrace& dev, Classification& c);

} // namespace poolscope::classify_detail
