// The assembled block-sparse matrix on the GPU: sliced ELLPACK by 32 rows (SELL-32), the twin
// of `MatrixSlots` in src/backend/topology.rs. Block j of row v sits in slot
// slice_bases[v / 32] + 32 j + v % 32, and entry k (row-major) of the block in slot s at
// k S + s, S the number of slots: the rows one warp handles read and write each entry of
// their blocks as one contiguous run. A stage that imports this binds `slice_bases` and
// `slot_columns` (the column of each slot).

const SLICE: u32 = 32u;

fn matrix_slot(v: u32, j: u32) -> u32 {
    return slice_bases[v / SLICE] + SLICE * j + v % SLICE;
}

fn matrix_entry(slot: u32, k: u32) -> u32 {
    return k * arrayLength(&slot_columns) + slot;
}
