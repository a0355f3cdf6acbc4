// Where element outputs live on the GPU: structure of arrays, so that consecutive elements
// (threads) write consecutive memory. With T tets and S springs:
// - the gradient at tet e's corner a (x, y, z; w unused) at vec4 a T + e, at spring s's end b
//   at 4 T + b S + s;
// - column c of upper block u (its rows in x, y, z; w unused) of tet e at vec4 (3u + c) T + e,
//   of spring s at 30 T + (3u + c) S + s.
// A warp's threads store one corner or column as one contiguous run, and a gather reads a
// corner as one aligned 16-byte load and a block as three (three and nine separate floats,
// each in a sector of its own, when every entry had an array).
// Consumers name an output by the CPU twin's slot numbers (corner slot 4e + a or 4T + 2s + b;
// block source 10e + u or 10T + 3s + u), as the model's incidence lists do.

fn tet_corner(e: u32, a: u32, tet_count: u32) -> u32 {
    return a * tet_count + e;
}

fn spring_corner(s: u32, b: u32, tet_count: u32, spring_count: u32) -> u32 {
    return 4u * tet_count + b * spring_count + s;
}

fn tet_block_column(e: u32, u: u32, c: u32, tet_count: u32) -> u32 {
    return (3u * u + c) * tet_count + e;
}

fn spring_block_column(s: u32, u: u32, c: u32, tet_count: u32, spring_count: u32) -> u32 {
    return 30u * tet_count + (3u * u + c) * spring_count + s;
}

// Corner slot `slot`.
fn corner(slot: u32, tet_count: u32, spring_count: u32) -> u32 {
    if (slot < 4u * tet_count) {
        return tet_corner(slot / 4u, slot % 4u, tet_count);
    }
    let local = slot - 4u * tet_count;
    return spring_corner(local / 2u, local % 2u, tet_count, spring_count);
}

// Column c of stored block `source`.
fn block_column(source: u32, c: u32, tet_count: u32, spring_count: u32) -> u32 {
    if (source < 10u * tet_count) {
        return tet_block_column(source / 10u, source % 10u, c, tet_count);
    }
    let local = source - 10u * tet_count;
    return spring_block_column(local / 3u, local % 3u, c, tet_count, spring_count);
}
