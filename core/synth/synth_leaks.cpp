// The leaks SynthModel::leaks plants in the training loop, and their look-alikes (issue 24). Each
// records its stacks as truth (SynthResult::leakStacks / lookalikeStacks) for the leak tests.
#include "core/synth/synth_generator.h"

#include <algorithm>

#include <charconv>

namespace poolscope {

std::optional<SynthLeaks> parseSynthLeaks(std::string_view list)
{
    SynthLeaks l;
    while (!list.empty()) {
        const size_t comma = list.find(',');
        const std::string_view item = list.substr(0, comma);
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
        if (item == "kept-graph")
            l.keptGraph = true;
        else if (item == "growing-cache")
            l.growingCache = true;
        else if (item == "hook")
            l.capturingHook = true;
        else if (item == "warmup")
            l.warmup = true;
        else if (item.substr(0, 5) == "bank=") {
            int n = 0;
            auto [p, ec] = std::from_chars(item.data() + 5, item.data() + item.size(), n);
            if (ec != std::errc() || p != item.data() + item.size() || n < 1)
                return std::nullopt;
            l.bankSize = n;
        } else
            return std::nullopt;
    }
    return l;
}

} // namespace poolscope

namespace poolscope::synth_detail {

void Generator::keepLeak(Tensor t, StackId stack, bool leak)
{
    auto& v = leak ? m_result.leakStacks : m_result.lookalikeStacks;
    if (std::find(v.begin(), v.end(), stack) == v.end())
        v.push_back(stack);
    (leak ? m_leaked : m_kept).push_back(t);
}

void Generator::warmupBuffer(int step)
{
    if (!m_model.leaks.warmup || step != 0)
        return;
    const StackId st = m_stacks.alloc(SynthOp::OnesLike, SynthSite::WarmupBuffer);
    keepLeak(alloc(m_model.seq * m_model.seq, st, Pool::Other), st, false);
}

void Generator::hookCapture(int layer)
{
    if (!m_model.leaks.capturingHook || layer != 0)
        return;
    const int64_t sbh = m_model.seq * m_model.microBatch * m_model.hidden;
    const StackId st = m_stacks.alloc(SynthOp::Clone, SynthSite::LeakHook);
    keepLeak(alloc(sbh * m_ea, st, Pool::Other), st, true);
}

void Generator::leakAfterBackward(int step)
{
    (void)step;
    const int64_t sbh = m_model.seq * m_model.microBatch * m_model.hidden;
    if (m_model.leaks.growingCache) {
        const StackId st = m_stacks.alloc(SynthOp::Clone, SynthSite::LeakCache);
        keepLeak(alloc(sbh * m_ea, st, Pool::Other), st, true);
    }
    if (m_model.leaks.bankSize > 0) {
        const StackId st = m_stacks.alloc(SynthOp::Clone, SynthSite::MemoryBank);
        m_bank.push_back(alloc(m_model.microBatch * m_model.hidden * 4, st, Pool::Other));
        if (std::find(m_result.lookalikeStacks.begin(), m_result.lookalikeStacks.end(), st) == m_result.lookalikeStacks.end())
            m_result.lookalikeStacks.push_back(st);
        if (int(m_bank.size()) > m_model.leaks.bankSize) {
            release(m_bank.front(), m_stacks.free(SynthSite::MemoryBank));
            m_bank.erase(m_bank.begin());
        }
    }
    if (m_model.leaks.keptGraph && !variantLayers() && m_model.zeroStage < 3) {
        // An evaluation forward with grad on whose loss is added to a running total: the total
        // holds the loss's graph, and the graph every activation it saved.
        forward();
        auto keep = [&](Tensor& t) {
            if (!t.live())
                return;
            auto it = m_live.find(t.addr);
            if (it != m_live.end())
                keepLeak(t, it->second.stack, true);
            t.addr = 0;
        };
        for (auto& x : m_saved)
            x.each(keep);
        for (auto& t : m_layerInput)
            keep(t);
        for (Tensor* t : {&m_head.lnf, &m_head.castHead, &m_head.castIn, &m_head.logits, &m_head.logp, &m_head.loss})
            keep(*t);
    }
}

} // namespace poolscope::synth_detail
