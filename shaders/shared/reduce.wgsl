// Deterministic workgroup sums: every stage that reduces uses this one fixed tree order, so a
// reduction gives the same bits every run (no float atomics).

#import shared/dispatch

var<workgroup> reduction: array<vec4<f32>, WORKGROUP>;

// The sum of `value` over the workgroup, in a fixed tree order; every invocation must call it
// (it contains barriers) and all receive the total.
fn workgroup_sum(lid: u32, value: vec4<f32>) -> vec4<f32> {
    reduction[lid] = value;
    workgroupBarrier();
    for (var stride = WORKGROUP / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            reduction[lid] += reduction[lid + stride];
        }
        workgroupBarrier();
    }
    let total = reduction[0];
    workgroupBarrier();
    return total;
}
