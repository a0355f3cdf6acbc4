// Deterministic workgroup sums through subgroup operations: the twin of shared/reduce, composed
// in its place where the device runs subgroups of a fixed size, SUBGROUP (a constant the
// composer writes ahead of this module), laid out in order of the local invocation index (the
// context checks both before it chooses this module). Each subgroup adds its invocations'
// values, its first invocation stores the subgroup's total, and after one barrier every
// subgroup adds the totals, lane k taking totals k, k + SUBGROUP, ... in that order. Two
// barriers a sum where the tree takes one per halving; the same bits every run, because the
// subgroup operation's order is fixed by the hardware, and every invocation receives them.

#import shared/dispatch

// The invocations of a workgroup: WORKGROUP in every pipeline but the one-workgroup PCG
// solve's, which takes 1 024 where the device allows.
override INVOCATIONS: u32 = WORKGROUP;

var<workgroup> reduction: array<vec4<f32>, INVOCATIONS>;

// The subgroups' totals, stored, are added by lane in index order.
fn lane_partials(lid: u32) -> vec4<f32> {
    var partial = vec4<f32>(0.0);
    for (var k = lid % SUBGROUP; k < INVOCATIONS / SUBGROUP; k += SUBGROUP) {
        partial += reduction[k];
    }
    return partial;
}

// The sum of `value` over the workgroup; every invocation must call it (it contains barriers)
// and all receive the total.
fn workgroup_sum(lid: u32, value: vec4<f32>) -> vec4<f32> {
    let own = subgroupAdd(value);
    if (lid % SUBGROUP == 0u) {
        reduction[lid / SUBGROUP] = own;
    }
    workgroupBarrier();
    let total = subgroupAdd(lane_partials(lid));
    workgroupBarrier();
    return total;
}

// The least `value` over the workgroup (min is exact, so any order gives the same bits); every
// invocation must call it and all receive the result.
fn workgroup_min(lid: u32, value: f32) -> f32 {
    let own = subgroupMin(value);
    if (lid % SUBGROUP == 0u) {
        reduction[lid / SUBGROUP] = vec4<f32>(own, 0.0, 0.0, 0.0);
    }
    workgroupBarrier();
    var least = reduction[0].x;
    for (var k = lid % SUBGROUP; k < INVOCATIONS / SUBGROUP; k += SUBGROUP) {
        least = min(least, reduction[k].x);
    }
    let total = subgroupMin(least);
    workgroupBarrier();
    return total;
}
