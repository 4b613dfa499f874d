#include "core/classify/structural_passes.h"

#include "core/classify/builtin_evidence.h"
#include "core/classify/structural_across.h"
#include "core/classify/structural_cache.h"
#include "core/classify/structural_casts_by_count.h"
#include "core/classify/structural_data_parallel.h"
#include "core/classify/structural_evidence.h"
#include "core/classify/structural_gradient_buffer.h"
#include "core/classify/structural_master_copies.h"
#include "core/classify/structural_nested_autograd.h"
#include "core/classify/structural_oom.h"
#include "core/classify/structural_program_state.h"
#include "core/classify/structural_quick_copies.h"
#include "core/classify/structural_recompute.h"
#include "core/classify/structural_state.h"
#include "core/classify/structural_step_state.h"
#include "core/classify/structural_workspace_calls.h"
#include "core/classify/structural_workspace_preexisting.h"
#include "core/classify/structural_workspace_release.h"

namespace poolscope::classify_detail {

void structureFromLifetimes(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    splitMegatronBuffers(trace, dev, c);
    keptFromBeforeFirstForward(dev, c);
    gradientsMovedInPairs(dev, c);
    keptBeforeAnyRelease(dev, c);
    builtLayerByLayerWithoutRelease(dev, c);
    savedForBackward(dev, c);
    gradientsBeforeRecording(trace, dev, c);
    perParameterBuffers(trace, dev, c);
    perParameterStateByOrder(dev, c);
    stepReplacements(dev, c);
    workspaceBySize(dev, c);
    workspaceReleasedAtEnd(dev, c);
    perCallMatmulWorkspace(trace, dev, c);
    cacheKeptWithItsGraph(dev, c);
    cacheFramesInTrainingForwards(trace, dev, c);
    forwardCache(trace, dev, c);
    cacheAcrossLayerRuns(dev, c);
    preallocatedCache(trace, dev, c);
    unwoundAtOom(dev, c);
    forwardProductsFromBeforeRecording(dev, c);
    heldPastTheirStep(dev, c);
    madeInTheStepInFlight(dev, c);
    hostBatchesCopiedToDevice(trace, dev, c);
    quickCopiesAreScratch(dev, c);
    parametersMovedBack(dev, c);
    // After the model's moves are known: a layer moved in between calls is the model's, not state.
    stateKeptAcrossCalls(dev, c);
    outputsCollectedAcrossCalls(dev, c);
}

void structureFromSizes(const Trace& trace, const DeviceTrace& dev, Classification& c)
{
    gradientBufferBesideFlatParameters(dev, c);
    masterCopiesByOrder(dev, c);
    dataParallelState(dev, c);
    // After the gathered parameters: a recomputed segment gathers its layer again, as its forward did.
    recomputedSegments(dev, c);
    stateRewrittenBetweenPasses(dev, c);
    autocastCastsByCount(trace, dev, c);
    programNamesWithoutHistory(trace, dev, c);
    weightFamilyWithoutHistory(dev, c);
    heldAtOomInBackward(dev, c);
    heldAtOomInStep(dev, c);
    heldAtOomInForward(dev, c);
    heldAtOomWithoutAPass(dev, c);
    gradientsMadeAfterTheirBackward(dev, c);
    gradientsNeedParameterSize(dev, c);
    nestedAutogradOutputs(dev, c);
    flagAutocastSurplus(dev, c);
    pendingFreeBlocks(dev, c);
    preexistingCopiesIndistinct(trace, dev, c);
    // Before the open forward's reading: a handle's workspace is no earlier layer's output.
    workspaceFromBeforeRecording(dev, c);
    // After the OOM's readings (what the forward in flight keeps reads as its activations there) and
    // the copies that cannot be told apart (a weight with its gradient and state: no layer's output).
    earlierLayersOfTheOpenForward(trace, dev, c);
    earlierCallsKeptAlike(dev, c);
    stateMadeAfterFirstBackward(dev, c);
    stateSteppedInBackward(dev, c);
}

} // namespace poolscope::classify_detail
