// FrameTable: interning, and which frame a table's "top frame" column shows for a stack.
#include "core/model/frames.h"

#include <QtTest>

#include <initializer_list>

using namespace poolscope;

namespace {

StackId stackOf(FrameTable& t, std::initializer_list<Frame> innermostFirst)
{
    std::vector<FrameId> ids;
    for (const Frame& f : innermostFirst)
        ids.push_back(t.internFrame(f));
    return t.internStack(ids);
}

// The innermost frames of a real stacks='all' trace (k_ctx128_fullstep, a gradient made in backward).
const std::initializer_list<Frame> kPlumbing = {
    {"", "torch::unwind::unwind()", 0},
    {"", "torch::CapturedTraceback::gather(bool, bool, bool)", 0},
    {"memory_snapshot.cpp", "torch::cuda::(anonymous namespace)::gather_with_cpp()", 0},
    {"CUDACachingAllocator.cpp", "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", 0},
    {"", "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*)", 0},
    {"", "at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)", 0},
    {"RegisterCUDA.cpp", "at::(anonymous namespace)::create_out(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::TensorOptions const&)", 0},
};

} // namespace

class TestFrames : public QObject {
    Q_OBJECT
private slots:
    void internsOnce()
    {
        FrameTable t;
        const FrameId a = t.internFrame("train.py", "step", 10);
        QCOMPARE(t.internFrame("train.py", "step", 10), a);
        QVERIFY(t.internFrame("train.py", "step", 11) != a);
        const std::vector<FrameId> s{a};
        QCOMPARE(t.internStack(s), t.internStack(s));
    }

    void userFramePrefersYourPython()
    {
        FrameTable t;
        const StackId s = stackOf(t, {{"/usr/lib/python3/site-packages/torch/nn/functional.py", "linear", 5},
                                      {"/home/me/model.py", "forward", 42},
                                      {"/home/me/train.py", "main", 7}});
        QCOMPARE(t.frame(t.userFrame(s)).name, std::string("forward"));
        // Only PyTorch's own Python: the innermost of it.
        const StackId only = stackOf(t, {{"/x/site-packages/torch/optim/adamw.py", "_single_tensor_adamw", 3}});
        QCOMPARE(t.frame(t.userFrame(only)).name, std::string("_single_tensor_adamw"));
    }

    // PyTorch's own files by the package after the installed tree, not by a directory called torch
    // above it: a capture machine kept its environment in /opt/torch/.venv, and every library frame
    // (transformers, torchvision) read as PyTorch's, so every table showed the script's line instead.
    // A copy cut to the package (redact --rename-code) and a source checkout still read as PyTorch's.
    void torchByItsPackageNotItsDirectory()
    {
        FrameTable t;
        const std::string venv = "/opt/torch/.venv/lib/python3.12/site-packages/";
        const StackId s = stackOf(t, {{venv + "torch/nn/functional.py", "linear", 5},
                                      {venv + "transformers/models/llama/modeling_llama.py", "forward", 480},
                                      {"/work/eval.py", "evaluate", 61}});
        QCOMPARE(t.frame(t.userFrame(s)).name, std::string("forward"));
        const StackId cut = stackOf(t, {{"torch/nn/functional.py", "linear", 5}, {"transformers/models/llama/modeling_llama.py", "forward", 480}});
        QCOMPARE(t.frame(t.userFrame(cut)).line, int64_t(480));
        const StackId checkout = stackOf(t, {{"/home/me/pytorch/torch/nn/functional.py", "linear", 5}, {"/home/me/run.py", "main", 9}});
        QCOMPARE(t.frame(t.userFrame(checkout)).name, std::string("main"));
        // Windows records backslashes (hdmw_ddpm_unet in the corpus showed torch's linear.py as its line).
        const StackId windows = stackOf(t, {{"C:\\Users\\me\\Python310\\lib\\site-packages\\torch\\nn\\modules\\linear.py", "forward", 116},
                                            {"d:\\dev\\unet.py", "forward", 134}});
        QCOMPARE(t.frame(t.userFrame(windows)).line, int64_t(134));
    }

    void cppStackShowsTheAutogradNode()
    {
        FrameTable t;
        std::vector<Frame> frames(kPlumbing);
        frames.push_back({"", "at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)", 0});
        frames.push_back({"", "torch::autograd::generated::BmmBackward0::apply(std::vector<at::Tensor>&&)", 0});
        frames.push_back({"", "torch::autograd::Engine::evaluate_function(...)", 0});
        std::vector<FrameId> ids;
        for (const Frame& f : frames)
            ids.push_back(t.internFrame(f));
        const StackId s = t.internStack(ids);
        QVERIFY(t.frame(t.userFrame(s)).name.starts_with("torch::autograd::generated::BmmBackward0::apply"));
    }

    void cppStackWithoutNodeShowsTheOperatorOrPastThePlumbing()
    {
        FrameTable t;
        std::vector<Frame> frames(kPlumbing);
        frames.push_back({"", "at::native::structured_mm_out_cuda::impl(...)", 0});
        frames.push_back({"", "at::_ops::mm::call(at::Tensor const&, at::Tensor const&)", 0});
        std::vector<FrameId> ids;
        for (const Frame& f : frames)
            ids.push_back(t.internFrame(f));
        QVERIFY(t.frame(t.userFrame(t.internStack(ids))).name.starts_with("at::_ops::mm::call"));

        ids.pop_back(); // no operator frame: the first frame that is not the allocator's
        QVERIFY(t.frame(t.userFrame(t.internStack(ids))).name.starts_with("at::native::structured_mm_out_cuda"));

        ids.pop_back(); // nothing but plumbing: the innermost frame, rather than nothing
        QCOMPARE(t.frame(t.userFrame(t.internStack(ids))).name, std::string("torch::unwind::unwind()"));
    }
};

QTEST_GUILESS_MAIN(TestFrames)
#include "test_frames.moc"
