#include "core/sites/site_tree.h"

#include "core/sites/site_key.h"
#include "core/model/torch_paths.h"
#include "core/util/units.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

namespace poolscope {
namespace {

// A user's line is a Python source line (a .py file, or <string>/<stdin>) outside PyTorch's own
// package; the interpreter's C frames (main.c:767 Py_BytesMain carries a line too), C++ frames and
// torch/ are library code.
bool isPythonSource(const Frame& f)
{
    const std::string& file = f.filename;
    return (file.size() > 3 && file.compare(file.size() - 3, 3, ".py") == 0) || (!file.empty() && file.front() == '<' && file != "<op>");
}
bool isLibrary(const Frame& f)
{
    const std::string& file = f.filename;
    return !isPythonSource(f) || isTorchSource(file);
}

std::string shortFile(const std::string& file)
{
    // Library paths from their package down ("torch/nn/modules/linear.py"), user paths as recorded.
    // Windows paths (backslashes) too: "C:\...\site-packages\torch\nn\modules\linear.py".
    for (const char* marker : {"site-packages/", "dist-packages/", "site-packages\\", "dist-packages\\"})
        if (auto p = file.rfind(marker); p != std::string::npos)
            return file.substr(p + std::string(marker).size());
    if (auto p = file.rfind("/torch/"); p != std::string::npos)
        return file.substr(p + 1);
    return file;
}

struct Agg {
    double weight = 0;
    int64_t bytes = 0, count = 0;
};

class Builder {
public:
    Builder(const Trace& trace, SiteTree& tree) : m_trace(trace), m_tree(tree), m_names(trace)
    {
        m_tree.nodes.clear();
        m_tree.nodes.push_back(SiteNode{"all", {}, 0, 0, 0, 0, 0, 0, {}});
    }

    void add(const Allocation& a, double weight)
    {
        Agg* g;
        if (a.stack.valid() && a.op == 0)
            g = &m_byStack[a.stack.value];
        else
            g = &m_bySite[m_names.key(a)];
        g->weight += weight;
        g->bytes += a.size;
        ++g->count;
    }

    void finish()
    {
        for (const auto& [stack, g] : m_byStack) {
            const uint32_t leaf = stackPath(StackId(stack));
            m_tree.leafOfStack[stack] = leaf;
            credit(leaf, g);
        }
        for (const auto& [key, g] : m_bySite) {
            // Frameless allocations under one node, by size; operators (Kineto) at the top.
            const uint32_t parent = SiteNames::hasCode(key) ? 0 : child(0, "noframes", "(no frames)", {}, 0, 0);
            const uint32_t leaf = child(parent, "site:" + std::to_string(key), m_names.label(key), {}, 0, 0);
            if (!SiteNames::hasCode(key))
                m_tree.leafOfSize[key & ((1ull << 62) - 1)] = leaf;
            else
                m_tree.leafOfSize[key] = leaf;
            credit(leaf, g);
        }
        for (SiteNode& n : m_tree.nodes)
            std::sort(n.children.begin(), n.children.end(), [&](uint32_t x, uint32_t y) {
                const auto& a = m_tree.nodes[x];
                const auto& b = m_tree.nodes[y];
                return a.weight != b.weight ? a.weight > b.weight : a.label < b.label;
            });
    }

private:
    uint32_t child(uint32_t parent, const std::string& key, const std::string& label, const std::string& file, int64_t line, int folded)
    {
        auto [it, fresh] = m_index.try_emplace(std::to_string(parent) + '\x1f' + key, uint32_t(m_tree.nodes.size()));
        if (fresh) {
            m_tree.nodes.push_back(SiteNode{label, file, line, 0, 0, 0, folded, parent, {}});
            m_tree.nodes[parent].children.push_back(it->second);
        }
        return it->second;
    }

    uint32_t stackPath(StackId id)
    {
        const auto frames = m_trace.frames.stack(id); // innermost first
        size_t innermostUser = frames.size();
        for (size_t k = 0; k < frames.size(); ++k)
            if (!isLibrary(m_trace.frames.frame(frames[k]))) {
                innermostUser = k;
                break;
            }
        uint32_t node = 0;
        if (innermostUser == frames.size()) {
            // No user frame (the autograd engine's thread, a C++-only stack): the site report names.
            const FrameId f = m_trace.frames.userFrame(id);
            const std::string label = frames.empty() ? "(no frames)" : f ? frameLabel(m_trace.frames.frame(f)) : "(no user frame)";
            if (frames.empty())
                return child(0, "noframes", label, {}, 0, 0);
            return child(0, "lib:" + label, label + " [library]", {}, 0, int(frames.size()));
        }
        for (size_t k = frames.size(); k-- > innermostUser;) {
            const Frame& fr = m_trace.frames.frame(frames[k]);
            if (isLibrary(fr))
                continue;
            node = child(node, "f:" + std::to_string(frames[k].value), frameLabel(fr), fr.filename, fr.line, 0);
        }
        if (innermostUser == 0)
            return node;
        // The library call the innermost user line made: named by its innermost Python frame (the
        // module or function PyTorch ran), else the operator or autograd node.
        std::string label;
        for (size_t k = 0; k < innermostUser && label.empty(); ++k)
            if (const Frame& fr = m_trace.frames.frame(frames[k]); isPythonSource(fr))
                label = frameLabel(fr);
        for (size_t k = innermostUser; k-- > 0 && label.empty();) { // the outermost operator: what the line called
            const std::string& name = m_trace.frames.frame(frames[k]).name;
            if (name.rfind("at::_ops::", 0) == 0) {
                const size_t end = name.find("::", 10);
                label = name.substr(0, end == std::string::npos ? name.find('(') : end);
            } else if (name.find("Backward") != std::string::npos && name.find("::apply") != std::string::npos) {
                label = name.substr(0, name.find("::apply"));
            }
        }
        if (label.empty())
            label = "library code";
        return child(node, "lib:" + label, label + " [+" + std::to_string(innermostUser) + " library frames]", {}, 0, int(innermostUser));
    }

    static std::string frameLabel(const Frame& f)
    {
        return f.isPython() ? shortFile(f.filename) + ":" + std::to_string(f.line) + " " + f.name : f.name.substr(0, f.name.find('('));
    }

    void credit(uint32_t leaf, const Agg& g)
    {
        for (uint32_t n = leaf;; n = m_tree.nodes[n].parent) {
            m_tree.nodes[n].weight += g.weight;
            m_tree.nodes[n].bytes += g.bytes;
            m_tree.nodes[n].count += g.count;
            if (n == 0)
                break;
        }
    }

    const Trace& m_trace;
    SiteTree& m_tree;
    SiteNames m_names;
    std::unordered_map<uint32_t, Agg> m_byStack;
    std::unordered_map<SiteKey, Agg> m_bySite;
    std::unordered_map<std::string, uint32_t> m_index;
};

} // namespace

uint32_t SiteTree::leafOf(const Allocation& a) const
{
    if (a.stack.valid() && a.op == 0) {
        auto it = leafOfStack.find(a.stack.value);
        return it == leafOfStack.end() ? 0 : it->second;
    }
    // Frameless: the size key; operators: their site key (both as SiteNames makes them).
    const uint64_t key = a.op != 0 ? ((1ull << 62) | a.op) : uint64_t(a.size);
    auto it = leafOfSize.find(key);
    return it == leafOfSize.end() ? 0 : it->second;
}

bool SiteTree::contains(uint32_t node, const Allocation& a) const
{
    if (node == 0)
        return true;
    for (uint32_t n = leafOf(a); n != 0; n = nodes[n].parent)
        if (n == node)
            return true;
    return false;
}

SiteTree siteTreeAt(const DeviceDocument& dev, EventIndex event)
{
    SiteTree tree;
    tree.at = event;
    tree.weightUnit = "bytes";
    Builder b(dev.trace(), tree);
    const auto& allocs = dev.device().allocations;
    for (AllocId id : dev.alive().aliveAfter(event))
        b.add(allocs[id.value], double(allocs[id.value].size));
    b.finish();
    return tree;
}

SiteTree siteTreeOverRun(const DeviceDocument& dev)
{
    SiteTree tree;
    tree.overRun = true;
    const DeviceTrace& t = dev.device();
    const bool time = t.hasTime;
    tree.weightUnit = time ? "byte-seconds" : "byte-events";
    Builder b(dev.trace(), tree);
    const EventIndex last = EventIndex(t.eventCount()) - 1;
    int64_t firstUs = kNoTime, lastUs = kNoTime;
    if (time)
        for (int64_t v : t.events.timeUs)
            if (v != kNoTime) {
                firstUs = firstUs == kNoTime ? v : std::min(firstUs, v);
                lastUs = lastUs == kNoTime ? v : std::max(lastUs, v);
            }
    for (const Allocation& a : t.allocations) {
        double life;
        if (time && firstUs != kNoTime) {
            const int64_t from = a.allocTimeUs != kNoTime ? a.allocTimeUs : firstUs;
            const int64_t to = a.freeTimeUs != kNoTime ? a.freeTimeUs : lastUs;
            life = double(std::max<int64_t>(0, to - from)) / 1e6;
        } else {
            const EventIndex from = std::max<EventIndex>(a.allocEvent, 0);
            const EventIndex to = a.freeCompletedEvent != kNoEvent ? a.freeCompletedEvent : last;
            life = double(std::max<EventIndex>(0, to - from));
        }
        b.add(a, double(a.size) * life);
    }
    b.finish();
    return tree;
}

std::string siteTreeText(const SiteTree& tree, int top, int depth)
{
    std::ostringstream o;
    const double total = tree.nodes.empty() ? 0 : tree.nodes[0].weight;
    auto amount = [&](const SiteNode& n) {
        if (tree.weightUnit == "bytes")
            return formatBytes(int64_t(n.weight));
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.3g %s", n.weight, tree.weightUnit.c_str());
        return std::string(buf);
    };
    std::function<void(uint32_t, int)> walk = [&](uint32_t id, int level) {
        const SiteNode& n = tree.nodes[id];
        const double share = total > 0 ? 100.0 * n.weight / total : 0;
        char pct[16];
        std::snprintf(pct, sizeof pct, "%5.1f%%", share);
        o << std::string(size_t(2 + 2 * level), ' ') << amount(n) << "  " << pct << "  " << n.label << "  (" << n.count << " allocation"
          << (n.count == 1 ? "" : "s") << ")\n";
        if (level >= depth)
            return;
        int shown = 0;
        double rest = 0;
        size_t restCount = 0;
        for (uint32_t c : n.children) {
            if (shown < top && (total <= 0 || tree.nodes[c].weight >= total * 0.001)) {
                walk(c, level + 1);
                ++shown;
            } else {
                rest += tree.nodes[c].weight;
                ++restCount;
            }
        }
        if (restCount)
            o << std::string(size_t(4 + 2 * level), ' ') << "(" << restCount << " smaller: " << (total > 0 ? int(std::lround(100.0 * rest / total)) : 0)
              << "% together)\n";
    };
    if (!tree.nodes.empty())
        walk(0, 0);
    return o.str();
}

nlohmann::json siteTreeJson(const SiteTree& tree, double minShare)
{
    using nlohmann::json;
    const double total = tree.nodes.empty() ? 0 : tree.nodes[0].weight;
    std::function<json(uint32_t)> node = [&](uint32_t id) {
        const SiteNode& n = tree.nodes[id];
        json j{{"label", n.label}, {"weight", n.weight}, {"bytes", n.bytes}, {"count", n.count}};
        if (!n.file.empty()) {
            j["file"] = n.file;
            j["line"] = n.line;
        }
        if (n.folded)
            j["folded_frames"] = n.folded;
        json kids = json::array();
        for (uint32_t c : n.children)
            if (tree.nodes[c].weight >= total * minShare && tree.nodes[c].weight > 0)
                kids.push_back(node(c));
        j["children"] = std::move(kids);
        return j;
    };
    json out{{"weight_unit", tree.weightUnit}, {"total", total}, {"over_run", tree.overRun}};
    out["event"] = tree.overRun ? json(nullptr) : json(tree.at);
    out["root"] = tree.nodes.empty() ? json(nullptr) : node(0);
    return out;
}

} // namespace poolscope
