// Deterministic workgroup sums: every stage that reduces uses this one fixed order, so a
// reduction gives the same bits every run (no float atomics).

#import shared/dispatch

// The invocations of a workgroup: WORKGROUP in every pipeline but the one-workgroup PCG
// solve's, which takes 1 024 where the device allows.
override INVOCATIONS: u32 = WORKGROUP;

var<workgroup> reduction: array<vec4<f32>, INVOCATIONS>;

// How many partial sums a reduction's first level leaves: about the square root of the
// workgroup, so that each level is a short serial sum. Three barriers however wide the
// workgroup, where a binary tree waits at one per halving (ten at 256, twelve at 1 024).
fn reduction_columns() -> u32 {
    return select(16u, 32u, INVOCATIONS > 256u);
}

// The sum of `value` over the workgroup, in a fixed order (the first invocations each sum one
// column of values `reduction_columns()` apart, then every invocation sums the columns), so
// every invocation receives the same bits every run; every invocation must call it (it
// contains barriers).
fn workgroup_sum(lid: u32, value: vec4<f32>) -> vec4<f32> {
    let columns = reduction_columns();
    reduction[lid] = value;
    workgroupBarrier();
    if (lid < columns) {
        var column = value;
        for (var i = lid + columns; i < INVOCATIONS; i += columns) {
            column += reduction[i];
        }
        // Only this invocation reads slot lid (< columns) before the next barrier.
        reduction[lid] = column;
    }
    workgroupBarrier();
    var total = reduction[0];
    for (var i = 1u; i < columns; i++) {
        total += reduction[i];
    }
    workgroupBarrier();
    return total;
}

// The least `value` over the workgroup (min is exact, so any order gives the same bits), in
// the sum's two levels; every invocation must call it and all receive the result.
fn workgroup_min(lid: u32, value: f32) -> f32 {
    let columns = reduction_columns();
    reduction[lid].x = value;
    workgroupBarrier();
    if (lid < columns) {
        var column = value;
        for (var i = lid + columns; i < INVOCATIONS; i += columns) {
            column = min(column, reduction[i].x);
        }
        reduction[lid].x = column;
    }
    workgroupBarrier();
    var least = reduction[0].x;
    for (var i = 1u; i < columns; i++) {
        least = min(least, reduction[i].x);
    }
    workgroupBarrier();
    return least;
}
