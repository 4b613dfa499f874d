// What a stack's frames say to the what-if (core/whatif/stack_facts.h) does not depend on the
// machine's path separators: a Windows capture (backslashes, as hdmw_ddpm_unet and zl_decomfl in the
// corpus record them) reads like the same run on Linux. Before, every Windows frame read as the
// user's code: torch's own linear.py was the call site, torch/optim's step no optimizer.
#include "core/model/frames.h"
#include "core/whatif/stack_facts.h"

#include <QtTest>

using namespace poolscope;

namespace {

StackOpFacts factsFor(const std::vector<Frame>& innermostFirst)
{
    FrameTable t;
    std::vector<FrameId> ids;
    for (const Frame& f : innermostFirst)
        ids.push_back(t.internFrame(f));
    const StackId st = t.internStack(ids);
    StackOpFacts f = stackFacts(t).at(st.value);
    if (f.userFrame)
        f.opKey += "@" + std::to_string(t.frame(f.userFrame).line); // the call site's line, to compare
    return f;
}

std::string windows(std::string path)
{
    std::replace(path.begin(), path.end(), '/', '\\');
    return "C:" + path;
}

} // namespace

class TestStackFactsPaths : public QObject {
    Q_OBJECT
private slots:
    void windowsPathsReadLikePosixOnes()
    {
        const std::string site = "/Users/me/AppData/Local/Programs/Python/Python310/lib/site-packages/";
        const std::vector<std::vector<Frame>> stacks = {
            {{site + "torch/nn/modules/linear.py", "forward", 116}, {"/dev/unet.py", "forward", 134}},
            {{site + "torch/optim/adam.py", "_single_tensor_adam", 400}, {"/dev/train.py", "main", 20}},
            {{site + "torch/nn/functional.py", "softmax", 1890}, {"/dev/attn.py", "forward", 30}},
        };
        for (const auto& posix : stacks) {
            std::vector<Frame> win = posix;
            for (Frame& f : win)
                f.filename = windows(f.filename);
            const StackOpFacts a = factsFor(posix), b = factsFor(win);
            QCOMPARE(b.flags, a.flags);
            QCOMPARE(b.opKey, a.opKey);
            // The user's line is the call site, not torch's.
            QVERIFY2(b.opKey.ends_with("@" + std::to_string(posix[1].line)), b.opKey.c_str());
        }
        QVERIFY(factsFor(stacks[1]).has(StackOpFacts::Optimizer));
    }

    // The call site is the program's line, not Python's standard library's: copy.deepcopy or
    // threading under the user's frame, as /usr/lib/python3.X/ is on Linux.
    void windowsStandardLibraryIsNoCallSite()
    {
        for (const std::string lib : {"C:\\Users\\me\\AppData\\Local\\Programs\\Python\\Python310\\lib\\copy.py",
                                      "C:\\Users\\me\\miniconda3\\envs\\dm\\Lib\\copy.py", "/usr/lib/python3.10/copy.py",
                                      "/lib/python3/copy.py"}) { // the last: as a renamed copy cuts them
            const StackOpFacts f = factsFor({{lib, "deepcopy", 172}, {"C:\\dev\\ema.py", "update", 40}});
            QVERIFY2(f.opKey.ends_with("@40"), (lib + " " + f.opKey).c_str());
        }
        // A user's own directory called lib on Windows is the user's.
        const StackOpFacts own = factsFor({{"C:\\dev\\proj\\lib\\blocks.py", "forward", 12}, {"C:\\dev\\train.py", "main", 5}});
        QVERIFY2(own.opKey.ends_with("@12"), own.opKey.c_str());
    }
};

QTEST_GUILESS_MAIN(TestStackFactsPaths)
#include "test_stack_facts_paths.moc"
