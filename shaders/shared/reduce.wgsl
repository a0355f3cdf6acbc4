// Deterministic workgroup sums: every stage that reduces uses this one fixed tree order, so a
// reduction gives the same bits every run (no float atomics).

#import shared/dispatch

// The invocations of a workgroup: WORKGROUP in every pipeline but the one-workgroup PCG
// solve's, which takes 1 024 where the device allows.
override INVOCATIONS: u32 = WORKGROUP;

var<workgroup> reduction: array<vec4<f32>, INVOCATIONS>;

// The sum of `value` over the workgroup, in a fixed tree order; every invocation must call it
// (it contains barriers) and all receive the total.
fn workgroup_sum(lid: u32, value: vec4<f32>) -> vec4<f32> {
    reduction[lid] = value;
    workgroupBarrier();
    for (var stride = INVOCATIONS / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            reduction[lid] += reduction[lid + stride];
        }
        workgroupBarrier();
    }
    let total = reduction[0];
    workgroupBarrier();
    return total;
}

// The least `value` over the workgroup (min is exact, so any order gives the same bits); every
// invocation must call it and all receive the result.
fn workgroup_min(lid: u32, value: f32) -> f32 {
    reduction[lid] = vec4<f32>(value, 0.0, 0.0, 0.0);
    workgroupBarrier();
    for (var stride = INVOCATIONS / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            reduction[lid].x = min(reduction[lid].x, reduction[lid + stride].x);
        }
        workgroupBarrier();
    }
    let least = reduction[0].x;
    workgroupBarrier();
    return least;
}
