// Autocast on or off (torch.autocast's CUDA rules, autocast_mode.cpp): matmul-family operators
// compute in 16 bits, an fp32 list (softmax, log_softmax, exp, pow, sums, norms, losses) in fp32,
// everything else in its inputs' widest type. The weights stay fp32 (master weights), so does the
// optimizer; autocast casts each weight once per forward into its cast cache (kept while backward
// needs it, or until the autocast region ends) and casts each fp32 input of a matmul. Turning it off
// drops the casts and widens what ran in 16 bits.
#include "core/whatif/autocast_eligible.h"
#include "core/whatif/plan.h"

#include "core/util/units.h"

#include <algorithm>
#include <map>
#include <unordered_set>
#include <vector>

namespace poolscope {

size_t softmaxFromStructure(const DeviceTrace& dev, const TraceModel& m, std::vector<OpPrecision>& precision, int64_t& bytes);
size_t castsFromStructure(const DeviceTrace& dev, const TraceModel& m, std::vector<OpPrecision>& precision);

namespace {

using autocast_detail::eligible;
using autocast_detail::kInputWindow;

constexpr int kInheritWindow = 16; // allocations back where an elementwise op's input may be

EventIndex before(EventIndex e) { return e > 0 ? e - 1 : kNoEvent; }

// Element-size ratio of every allocation, in allocation order: operators by autocast's lists, the
// rest by the latest live tensor of the same bytes (their input, as an elementwise op's output).
// `guessed`: of the bytes that change, those of tensors whose frames name no operator (Python-only
// stacks under a user's own module): their element size follows their neighbours, unconfirmed.
// `unknown` marks those tensors, whatever their ratio came out (`unknownBytes`: their recorded
// bytes); with `guess` Low or High they take one end of what they can be instead of following.
std::vector<Ratio> elementRatios(const DeviceTrace& dev, const TraceModel& m, const std::vector<OpPrecision>& precision, bool toLow,
                                 ElementGuess guess, int64_t& changed, int64_t& guessed, std::vector<uint8_t>& unknown,
                                 int64_t& unknownBytes)
{
    const size_t n = dev.allocations.size();
    std::vector<Ratio> ratio(n);
    unknown.assign(n, 0);
    std::vector<uint8_t> decided(n, 0);
    const Ratio narrow{1, 2}, widen{2, 1}, drop{0, 1};
    // The residual stream: a layer's input and the adds that carry it keep the type the embedding
    // made (embedding is no autocast operator, so fp32 under autocast).
    std::vector<int64_t> residual;
    for (const auto& pass : m.passes)
        if (pass.inputBytes > 0)
            residual.push_back(pass.inputBytes);
    for (size_t a = 0; a < n; ++a) {
        if (!eligible(m, a))
            continue;
        const Allocation& al = dev.allocations[a];
        // A bool mask (a comparison, dropout's mask: the smaller of its pair) stays one byte a value.
        // The residual stream's bytes (a layer's input) keep its type, whether the operator is known
        // or its frames name none (a user's own norm or add).
        if (m.mask[a] || ((precision[a] == OpPrecision::Promote || precision[a] == OpPrecision::Unknown) &&
                          std::find(residual.begin(), residual.end(), m.requestedSize[a]) != residual.end())) {
            decided[a] = 1;
            continue;
        }
        switch (precision[a]) {
        case OpPrecision::Lower:
            ratio[a] = toLow ? narrow : widen;
            decided[a] = 1;
            break;
        case OpPrecision::Fp32:
            decided[a] = 1;
            break;
        case OpPrecision::Cast:
            if (!toLow)
                ratio[a] = drop; // autocast's casts (and upcasts of what is fp32 already) are not made
            decided[a] = 1;
            break;
        default: {
            // In backward a gradient has the type of the forward tensor it is the gradient of (the
            // autograd engine casts it so), and a node computes in its forward output's type: the
            // latest forward tensor of the same bytes still kept for backward is the one whose node
            // runs now.
            if (m.phaseAt(al.allocEvent) == Phase::Backward) {
                size_t mirror = SIZE_MAX;
                for (size_t b = a; b-- > 0;) {
                    const Allocation& in = dev.allocations[b];
                    if (in.preexisting())
                        break;
                    if (!m.saved[b] || !decided[b] || in.size != al.size ||
                        (in.freeCompletedEvent != kNoEvent && in.freeCompletedEvent < al.allocEvent))
                        continue;
                    mirror = b;
                    break;
                }
                if (mirror != SIZE_MAX) {
                    ratio[a] = ratio[mirror].num == 0 ? Ratio{} : ratio[mirror];
                    decided[a] = 1;
                    break;
                }
            }
            if (precision[a] == OpPrecision::Unknown) {
                unknown[a] = 1;
                unknownBytes += al.size;
                if (guess != ElementGuess::Follow) {
                    // One end of the range: all 16-bit (autocast on) or all kept fp32, and the reverse
                    // without autocast (all recorded fp32, kept; all recorded 16-bit, widened).
                    if ((guess == ElementGuess::Low) == toLow)
                        ratio[a] = toLow ? narrow : widen;
                    decided[a] = 1;
                    break;
                }
            }
            // The latest live tensor of the same bytes is its input (an elementwise op); failing
            // that, the latest tensor made at all carries the type the code is running in.
            int seen = 0;
            bool found = false;
            size_t nearest = SIZE_MAX;
            for (size_t b = a; b-- > 0 && seen < kInheritWindow;) {
                const Allocation& in = dev.allocations[b];
                if (in.preexisting())
                    break;
                if (!eligible(m, b) || !decided[b])
                    continue;
                ++seen;
                if (nearest == SIZE_MAX && precision[b] != OpPrecision::Fp32 && precision[b] != OpPrecision::Cast)
                    nearest = b;
                if (in.size != al.size || (in.freeCompletedEvent != kNoEvent && in.freeCompletedEvent < al.allocEvent))
                    continue;
                ratio[a] = ratio[b].num == 0 ? Ratio{} : ratio[b];
                found = true;
                break;
            }
            // Only for a known operator (Promote: it runs in the type it is given): a tensor whose
            // frames name no operator (Python-only stacks of a user's own code) may as well be one of
            // autocast's fp32 results or casts, and is kept as recorded rather than guessed.
            if (!found && nearest != SIZE_MAX && precision[a] != OpPrecision::Unknown)
                ratio[a] = ratio[nearest].num == 0 ? Ratio{} : ratio[nearest];
            decided[a] = 1;
            break;
        }
        }
        if (!ratio[a].isOne()) {
            changed += al.size;
            if (precision[a] == OpPrecision::Unknown)
                guessed += al.size;
        }
    }
    // A weight's 16-bit gradient on its way into an fp32 .grad: without autocast the node makes the
    // fp32 gradient itself.
    if (!toLow)
        for (size_t g = 0; g < n; ++g)
            if (m.gradSource[g] >= 0 && dev.allocations[size_t(m.gradSource[g])].size * 2 == dev.allocations[g].size)
                ratio[size_t(m.gradSource[g])] = drop;
    return ratio;
}



// Input sizes (bytes) of a linear layer x @ W that makes `out` bytes, for each weight matrix W of the
// run: with T tokens, out = T * d_out elements and W = d_in * d_out, so x = T * d_in elements (what
// autocast casts is fp32, as the recorded output and the master weights are). None where T is
// unknown or no matrix divides.
std::vector<int64_t> linearInputSizes(const TraceModel& m, int64_t out)
{
    std::vector<int64_t> sizes;
    const int64_t tokens = m.dims.tokens;
    if (tokens <= 0 || out <= 0 || out % tokens != 0)
        return sizes;
    const int64_t perToken = out / tokens; // d_out elements of the output's size
    for (const auto* matrices : {&m.unitMatrices, &m.otherMatrices})
        for (int64_t w : *matrices)
            if (w % perToken == 0) // fp32 weights and output: d_in = W / (d_out * 4 B); what is cast is fp32, 4 B
                sizes.push_back(tokens * (w / perToken) * 4);
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    return sizes;
}

// The Python frames of two stacks are the same (one line of the user's code), whatever C++ frames
// differ below them. Without a frame table, the whole stacks.
bool samePythonLine(const FrameTable* frames, StackId x, StackId y)
{
    if (x == y)
        return true;
    if (!frames || !x.valid() || !y.valid())
        return false;
    auto python = [&](StackId s) {
        std::vector<FrameId> out;
        for (FrameId f : frames->stack(s)) {
            const std::string& file = frames->frame(f).filename;
            if (file.size() > 3 && file.ends_with(".py"))
                out.push_back(f);
        }
        return out;
    };
    const std::vector<FrameId> px = python(x);
    return !px.empty() && px == python(y);
}

// The fp32 tensors matmul `a` reads, to be cast to 16 bits: live, made in its pass, following the
// batch (a weight, a mask or a position table is no activation input). Two shapes of matmul:
// - A linear layer (its output has T tokens of a weight matrix's output width): its input is the
//   latest live tensor of a width that matrix takes. Sibling linear layers' outputs are passed over
//   (q, k and v read one x: a linear output whose own input has this one's width), and so are
//   16-bit tensors of another width (SwiGLU's w3 reads x past w1's gate); a 16-bit tensor of the
//   width (attention's output, reshaped or not) is the input, not cast.
// - Activation by activation (attention's q kT, P V), where the output grows with s^2 (the scores)
//   or the latest live fp32 tensor has no linear width: its two latest live inputs, the second at least as large as the smaller of the
//   first and the output (a contraction's operands; a softmax's row sums are none). A 16-bit one (a
//   matmul's output) counts, but is not cast.
// Without the tokens T no width is known: the latest live fp32 tensor, as one input.
std::vector<size_t> matmulInputs(const DeviceTrace& dev, const TraceModel& m, const FrameTable* frames,
                                 const std::vector<OpPrecision>& precision, const std::vector<Ratio>& ratio, size_t a, EventIndex passBegin,
                                 std::vector<size_t>& linearInput)
{
    const Allocation& al = dev.allocations[a];
    // Attention's scores (b*s^2, their size law) are no linear layer's output, whatever divides.
    const std::vector<int64_t> widths = seqExponent(m.law[a]) > 1 ? std::vector<int64_t>{} : linearInputSizes(m, al.size);
    // Candidates, latest first: live batch-dependent tensors made in the pass before the matmul.
    std::vector<size_t> live;
    int seen = 0;
    for (size_t b = a; b-- > 0 && seen < kInputWindow;) {
        const Allocation& in = dev.allocations[b];
        if (in.preexisting() || in.allocEvent < passBegin)
            break;
        if (!eligible(m, b) || in.size < 512)
            continue;
        ++seen;
        // A tensor that follows the tokens has a whole number of bytes per token.
        const bool perToken = m.dims.tokens <= 0 || in.size % m.dims.tokens == 0;
        // A bool mask (dropout's, a comparison's) is no matmul operand.
        if ((in.freeCompletedEvent == kNoEvent || in.freeCompletedEvent >= al.allocEvent) && batchExponent(m.law[b]) > 0 && perToken &&
            !m.mask[b])
            live.push_back(b);
    }
    auto sixteenBit = [&](size_t b) { return precision[b] == OpPrecision::Lower || !ratio[b].isOne(); };
    std::vector<size_t> casts;
    // One call's second allocation (einsum's output buffer and its bmm: C++ frames apart, the same
    // Python line) right after its first: the call's casts came before its first. Sibling calls
    // from separate lines (q, k and v) each cast their input.
    if (!live.empty() && precision[live.front()] == OpPrecision::Lower && samePythonLine(frames, al.stack, dev.allocations[live.front()].stack)) {
        bool between = false;
        for (size_t b = live.front() + 1; b < a && !between; ++b)
            between = eligible(m, b);
        if (!between)
            return casts;
    }
    if (m.dims.tokens <= 0) {
        for (size_t b : live) {
            if (precision[b] == OpPrecision::Lower && dev.allocations[b].stack == al.stack)
                continue; // a sibling matmul of the same call reads the same input
            if (!sixteenBit(b))
                casts.push_back(b);
            break;
        }
        return casts;
    }
    // A linear layer reads tokens x features: never attention's b*s^2 scores, whatever their bytes.
    auto isWidth = [&](size_t b) {
        return seqExponent(m.law[b]) <= 1 && std::binary_search(widths.begin(), widths.end(), dev.allocations[b].size);
    };
    for (size_t b : live) {
        const bool width = isWidth(b);
        // A sibling linear layer's output (q beside k): it read an input this one may read too.
        const bool sibling = precision[b] == OpPrecision::Lower &&
                             (!width || (linearInput[b] != SIZE_MAX && isWidth(linearInput[b])));
        if (sibling || (sixteenBit(b) && !width))
            continue;
        if (!width)
            break; // an fp32 tensor no linear layer of this output takes: activation by activation
        linearInput[a] = b;
        if (!sixteenBit(b))
            casts.push_back(b);
        return casts;
    }
    // The two operands, latest first. One smaller than both the next and the output is none (a
    // mask made beside the scores). A contraction [B,m,k] x [B,k,n] -> [B,m,n] in attention: q kT
    // has operands of one size, P V has V of the output's size beside P; two b*s^2 tensors are not
    // one product's operands (the softmax kept beside its dropout). Anything else ends the search.
    auto quadratic = [&](size_t b) { return seqExponent(m.law[b]) > 1; };
    std::vector<size_t> operands;
    for (size_t b : live) {
        const int64_t size = dev.allocations[b].size;
        if (operands.empty()) {
            operands.push_back(b);
            continue;
        }
        const size_t f = operands[0];
        const int64_t first = dev.allocations[f].size;
        if (first < std::min(size, al.size)) {
            operands[0] = b;
            continue;
        }
        if ((size == first || size == al.size) && !(quadratic(b) && quadratic(f)))
            operands.push_back(b);
        break;
    }
    for (size_t b : operands)
        if (!sixteenBit(b))
            casts.push_back(b);
    return casts;
}

} // namespace

void applyAutocast(const DeviceTrace& dev, const TraceModel& m, const Scenario& sc, const FrameTable* frames, ElementGuess guess,
                   Plan& plan)
{
    if (sc.autocast == AutocastKind::Keep)
        return;
    const bool toLow = sc.autocast != AutocastKind::Off;
    // The run facts' autocast (the classifier's casts, found with any frames), confirmed by
    // at::autocast's own frames or the weights' casts the size laws found.
    bool castsSeen = m.autocastSeen || m.autocastFact == Known::Yes;
    for (size_t a = 0; a < m.weightCast.size() && !castsSeen; ++a)
        castsSeen = m.weightCast[a] != 0;
    if (toLow && castsSeen) {
        plan.notes.push_back("the trace already ran under autocast (its frames and casts say so): bf16 and fp16 take the "
                             "same bytes, nothing changes");
        return;
    }
    if (!toLow && !castsSeen) {
        plan.notes.push_back("the trace shows no autocast (no autocast frames, no weight casts): it is fp32 already");
        return;
    }
    const size_t n = plan.size.size();
    // What autocast did to each operator's output; with casts known only from the weights' 16-bit
    // twins (no frame names a cast), the inputs' casts are found by the order of a call's allocations.
    std::vector<OpPrecision> precision = m.precision;
    size_t structuralCasts = 0;
    const bool framesNameCasts =
        m.autocastSeen || std::find(m.precision.begin(), m.precision.end(), OpPrecision::Cast) != m.precision.end();
    if (!toLow && !framesNameCasts)
        structuralCasts = castsFromStructure(dev, m, precision);
    // A hand-written softmax between attention's products, told by its reductions (plan_softmax.cpp):
    // the prediction's reading; the range still spans those tensors as of unknown element size.
    int64_t softmaxBytes = 0;
    const size_t softmaxTensors = toLow && guess == ElementGuess::Follow ? softmaxFromStructure(dev, m, precision, softmaxBytes) : 0;
    int64_t changed = 0, guessed = 0;
    std::vector<uint8_t> unknown;
    const std::vector<Ratio> ratio = elementRatios(dev, m, precision, toLow, guess, changed, guessed, unknown, plan.unknownElementBytes);
    plan.unknownElementBytes += softmaxBytes;
    // What the frames cannot tell is said, not hidden in the figure.
    if (guessed > 0) {
        plan.notes.push_back(formatBytes(guessed) + " of the " + formatBytes(changed) +
                             " that change size were made by code whose frames name no operator (Python-only stacks): "
                             "their element size is taken from the tensors they follow, which the frames cannot confirm");
        if (guessed * 4 >= changed)
            plan.caveats.push_back("precision: the element size of " + formatBytes(guessed) +
                                   " of activations is a guess (no operator in their frames)");
    }
    if (softmaxTensors > 0)
        plan.notes.push_back("a softmax written by hand between attention's products (two reductions over the scores' last "
                             "dimension, no frame naming exp or sum): " + std::to_string(softmaxTensors) + " tensors (" +
                             formatBytes(softmaxBytes) + " over the trace) taken as autocast's fp32 results: exp's outputs "
                             "kept for backward, the sum, and the quotient by it (type promotion); where no frame names attention's "
                             "products (an inline q @ k.T), its first b*s^2 tensor and the first per-token tensor after "
                             "the softmax, as 16-bit products");
    for (size_t a = 0; a < n; ++a)
        if (!ratio[a].isOne())
            plan.size[a] = ratio[a].apply(plan.size[a]);
    if (!toLow) {
        // An input's cast was what its matmul kept: without autocast the fp32 source itself is kept
        // as long as the cast was (the source of the cast, made just before it with twice its bytes).
        int64_t kept = 0;
        // One call's casts (q and k cast for one q kT: consecutive casts under one stack) read distinct
        // sources; a later call may cast a source again (q, k and v each cast x).
        std::vector<size_t> claimer(n, SIZE_MAX);
        auto sameCall = [&](size_t x, size_t y) { // x < y, both casts
            if (dev.allocations[x].stack != dev.allocations[y].stack)
                return false;
            for (size_t z = x + 1; z < y; ++z)
                if (precision[z] != OpPrecision::Cast && eligible(m, z))
                    return false;
            return true;
        };
        for (size_t c = 0; c < n; ++c) {
            const Allocation& cast = dev.allocations[c];
            // Casts the classifier could not tell from weights' (cast_cache, but more than the weights:
            // weightCast unset) may be inputs' too: each claims a live fp32 source of twice its bytes,
            // one source per cast, so a weight's cast beside its input's finds the source taken.
            const bool unsure = m.pool[c] == Pool::CastCache && !m.weightCast[c];
            if (cast.preexisting() || precision[c] != OpPrecision::Cast || m.weightCast[c] || !(eligible(m, c) || unsure))
                continue;
            int seen = 0;
            for (size_t b = c; b-- > 0 && seen < kInputWindow;) {
                const Allocation& src = dev.allocations[b];
                if (src.preexisting())
                    break;
                ++seen;
                if (src.size != 2 * cast.size || !eligible(m, b) || (src.freeCompletedEvent != kNoEvent && src.freeCompletedEvent < cast.allocEvent))
                    continue;
                if (!unsure && claimer[b] != SIZE_MAX && sameCall(claimer[b], c))
                    continue;
                if (claimer[b] == SIZE_MAX)
                    claimer[b] = c;
                const bool castOutlives = cast.freeCompletedEvent == kNoEvent ||
                                          (src.freeCompletedEvent != kNoEvent && cast.freeCompletedEvent > src.freeCompletedEvent);
                if (castOutlives && plan.size[b] > 0) {
                    plan.extras.push_back({before(src.allocEvent), cast.freeCompletedEvent, plan.size[b], src.stream, m.pool[b]});
                    kept += plan.size[b];
                    plan.size[b] = 0;
                }
                break;
            }
        }
        int64_t casts = 0;
        for (size_t a = 0; a < n; ++a)
            if (m.weightCast[a] || m.pool[a] == Pool::CastCache) {
                casts += plan.size[a];
                plan.size[a] = 0;
            }
        plan.notes.push_back("autocast off: the weight-cast cache (" + formatBytes(casts) + ") and the inputs' casts are not made (" +
                             formatBytes(kept) + " of fp32 inputs their matmuls kept through a cast are kept themselves); "
                             "matmul outputs and what follows them widen to fp32 (" + formatBytes(changed) +
                             " of activations over the trace change size); weights, gradients and optimizer state stay");
        if (structuralCasts > 0)
            plan.notes.push_back("no frame names a cast (Python-only stacks): " + std::to_string(structuralCasts) +
                                 " inputs' casts told from the matmul outputs by their place in the call (made first, half the "
                                 "bytes of a live fp32 input) and dropped, not widened");
        return;
    }
    // The cast cache: each weight matrix once per forward, from where its unit begins until its
    // backward has used it (or until autocast's region, the forward, ends).
    // One region over every step: the cache keeps each cast until the region exits, so only the
    // first forward casts (later ones find the cast in the cache) and nothing frees it in the trace.
    int64_t cacheBytes = 0;
    const int64_t stream = dev.allocations.empty() ? 0 : dev.allocations.front().stream;
    for (size_t p = 0; p < m.passes.size() && !(sc.autocastWholeRun && p > 0); ++p) {
        const ForwardPass& pass = m.passes[p];
        const EventIndex passEnd = sc.autocastWholeRun ? kNoEvent : pass.backwardEnd != kNoEvent ? pass.backwardEnd : pass.end;
        std::vector<int64_t> whole = m.otherMatrices;
        if (pass.layers.empty())
            whole.insert(whole.end(), m.unitMatrices.begin(), m.unitMatrices.end());
        for (int64_t bytes : whole) {
            plan.extras.push_back({before(pass.begin), passEnd, bytes / 2, stream, Pool::CastCache});
            cacheBytes += bytes / 2;
        }
        for (const auto& span : pass.layers) {
            const EventIndex until = sc.autocastWholeRun ? kNoEvent : span.backwardEnd != kNoEvent ? span.backwardEnd : pass.end;
            for (int64_t bytes : m.unitMatrices) {
                plan.extras.push_back({before(span.forwardBegin), until, bytes / 2, stream, Pool::CastCache});
                cacheBytes += bytes / 2;
            }
        }
    }
    // Each matmul casts its fp32 inputs (matmulInputs: which live tensors it reads). The cast is what
    // the matmul saves for backward where the recorded run kept the fp32 input past the forward (a
    // graph held it): it lives as long as the input did, and the input, kept only for it, goes after
    // its last cast. Outside a graph the cast is transient.
    int64_t inputCasts = 0;
    std::map<size_t, EventIndex> lastCastOf; // fp32 source -> the event of its last cast
    std::vector<EventIndex> passBegin;
    for (const auto& pass : m.passes)
        passBegin.push_back(pass.begin);
    std::vector<size_t> linearInput(n, SIZE_MAX); // a linear layer's output -> the tensor it read
    for (size_t a = 0; a < n && !passBegin.empty(); ++a) {
        const Allocation& al = dev.allocations[a];
        if (al.preexisting() || !eligible(m, a) || precision[a] != OpPrecision::Lower)
            continue;
        const auto it = std::upper_bound(passBegin.begin(), passBegin.end(), al.allocEvent);
        if (it == passBegin.begin())
            continue;
        const ForwardPass& pass = m.passes[size_t(it - passBegin.begin()) - 1];
        if (al.allocEvent > pass.end)
            continue;
        for (size_t b : matmulInputs(dev, m, frames, precision, ratio, a, pass.begin, linearInput)) {
            const Allocation& in = dev.allocations[b];
            const bool kept = m.saved[b] != 0;
            const EventIndex until = kept ? in.freeCompletedEvent : al.allocEvent + 1;
            // Its bytes as the other knobs left them (a longer sequence casts a longer input).
            plan.extras.push_back({before(al.allocEvent), until, plan.size[b] / 2, al.stream, Pool::Activation});
            inputCasts += plan.size[b] / 2;
            if (kept)
                lastCastOf[b] = al.allocEvent;
        }
    }
    int64_t released = 0;
    for (auto& [b, at] : lastCastOf) {
        plan.earlyFree[b] = at + 1;
        released += plan.size[b];
    }
    // Autocast's fp32 operators (softmax, exp, log_softmax...) cast a 16-bit input to fp32 first: the
    // tensor made just before them, when it is now 16-bit. An elementwise one only (its output has
    // its input's elements): a reduction (sum, norms) takes the fp32 dtype as an argument and reads
    // the 16-bit input itself (fp32_set_opt_dtype, fp32_append_dtype), no copy.
    int64_t upcasts = 0;
    for (size_t a = 1; a < n; ++a) {
        const Allocation& al = dev.allocations[a];
        // At the high end of the range a tensor of unknown operator is one of autocast's fp32 results.
        const bool fp32Op = precision[a] == OpPrecision::Fp32 || (guess == ElementGuess::High && unknown[a]);
        if (al.preexisting() || !eligible(m, a) || !fp32Op)
            continue;
        for (size_t b = a; b-- > 0;) {
            const Allocation& in = dev.allocations[b];
            if (in.preexisting() || !eligible(m, b))
                continue;
            if ((in.freeCompletedEvent == kNoEvent || in.freeCompletedEvent >= al.allocEvent) && ratio[b] == Ratio{1, 2} &&
                in.size >= 512 && in.size <= al.size) {
                plan.extras.push_back({before(al.allocEvent), al.allocEvent + 1, plan.size[b] * 2, al.stream, Pool::Temporary});
                upcasts += plan.size[b] * 2;
            }
            break;
        }
    }
    // A weight's gradient comes out of backward in 16 bits and is cast into its fp32 .grad.
    int64_t gradCasts = 0;
    for (size_t a = 0; a < n; ++a) {
        const Allocation& al = dev.allocations[a];
        if (m.pool[a] != Pool::Gradient || al.preexisting() || m.gradSource[a] >= 0 ||
            !std::binary_search(m.unitMatrices.begin(), m.unitMatrices.end(), m.requestedSize[a]))
            continue;
        plan.extras.push_back({before(al.allocEvent), al.allocEvent + 1, plan.size[a] / 2, al.stream, Pool::Temporary});
        gradCasts += plan.size[a] / 2;
    }
    plan.notes.push_back(std::string("autocast ") + std::string(autocastName(sc.autocast)) +
                         ": matmul outputs and what follows them in 16 bits, softmax, norms, exp and losses in fp32 (" +
                         formatBytes(changed) + " of activations over the trace change size); weight-cast cache " +
                         formatBytes(cacheBytes) +
                         (sc.autocastWholeRun ? " (each weight matrix once, in the first forward, kept until the region exits), casts of "
                                              : " (each weight matrix once per forward, kept until its backward), casts of ") +
                         "matmuls' fp32 inputs " + formatBytes(inputCasts) + ", fp32 operators' 16-bit inputs " + formatBytes(upcasts) +
                         " (transient; the fp32 tensors only matmuls kept, " + formatBytes(released) +
                         ", go once cast), 16-bit weight gradients cast into fp32 .grad " +
                         formatBytes(gradCasts) + "; weights stay fp32 (master weights), so do gradients and optimizer state");
}

} // namespace poolscope
