// The assembled block-sparse matrix on the GPU: sliced ELLPACK by 32 rows with the rows
// sorted by length within windows (SELL-C-sigma), the twin of `MatrixSlots` in
// src/backend/topology.rs. Row v sits at position p (`row_position`, `row_at` the inverse),
// its block j in slot slice_base(p / 32) + 32 j + p % 32, and entry k (row-major) of the block
// in slot s at k S + s, S the number of slots: the rows at a warp's positions read and write
// each entry of their blocks as one contiguous run, and have about as many blocks each. A
// stage that imports this binds `row_offsets`, `row_slices` (the slice bases, the rows'
// positions, the positions' rows) and `slot_columns` (the column of each slot).

const SLICE: u32 = 32u;

fn matrix_rows() -> u32 {
    return arrayLength(&row_offsets) - 1u;
}

fn slice_count() -> u32 {
    return (matrix_rows() + SLICE - 1u) / SLICE;
}

fn row_position(v: u32) -> u32 {
    return row_slices[slice_count() + v];
}

fn row_at(p: u32) -> u32 {
    return row_slices[slice_count() + matrix_rows() + p];
}

// Block j of the row at position p.
fn position_slot(p: u32, j: u32) -> u32 {
    return row_slices[p / SLICE] + SLICE * j + p % SLICE;
}

// Block j of row v.
fn matrix_slot(v: u32, j: u32) -> u32 {
    return position_slot(row_position(v), j);
}

fn matrix_entry(slot: u32, k: u32) -> u32 {
    return k * arrayLength(&slot_columns) + slot;
}
