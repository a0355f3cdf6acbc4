// Stage `pcg`: preconditioned conjugate gradients on the assembled block-sparse Hessian,
// entirely on the GPU, two dispatches per iteration (one in a budget's pipelined form, see
// `pipelined`). The twin of src/backend/cpu/pcg.rs:
// start from zero, stop at |r| <= tol |b|, and stop on non-positive curvature (returning the
// last iterate, or b on the first iteration).
//
// Warm start (`params.warm`, local/global's global steps): successive global steps solve with
// one matrix for directions that are nearly parallel, so the solve starts from the Galerkin
// combination of the last solution d1 (`warm` 1) or the last two d1, d2 (`warm` 2; d2 in
// `earlier_direction`): x0 = c1 d1 + c2 d2 minimizes the quadratic q(x) = x.S x / 2 - b.x
// over their span (`warm_product` forms S d1 into `ap`, S d2 into `earlier_product`, and the
// dot products; every workgroup of `setup` solves the 2x2 system). Two nearly parallel
// directions fall back to d1 alone, c1 = b.d1 / d1.S d1, and c1 is 0 when d1.S d1 is not
// positive. Then q(x0) <= 0, and CG only lowers it, so an unfinished solve still never
// increases local/global's objective; the tolerance stays relative to |b|. On the 15K-tet
// bar the start's residual is 5-30 % of |b| from d1 alone after the first two global steps,
// and 0.6-8 % from both after the first three.
//
// FSAI (src/backend/fsai.rs) applies z = G^T G r per coordinate. The loop multiplies by the
// explicit product M = G^T G (`fsai_inverse`, in slots like the matrix's): z needs the new r
// at every vertex two edges away, so `update` forms it on the fly as r - alpha Ap, leaves the
// new r in `fsai_y` and the next `product` moves it into r (a vertex's r is read by its
// neighbours until then).
// Coarse correction (`coarse_clusters` > 0, with FSAI; src/backend/coarse.rs): z also takes
// C r = Z K^-1 Z^T r, Z the clusters' affine modes, K^-1 dense (`coarse_inverse`, the f64
// inverse of Z^T S Z rounded to f32, split along the translations: see `coarse_prolong`).
// `setup` and `update` run a workgroup more per cluster, which sums its members' w r into
// `coarse_restricted` (forming r as the rows do: no workgroup waits on another); K^-1 needs
// all of Z^T r, so one dispatch follows:
// `coarse_prolong` forms each cluster's c = (K^-1 Z^T r) rows, adds Z c to z at its members
// and writes its share of r.C r to `coarse_partials`, which `product` adds to r.z. Three
// dispatches an iteration. Solves with a penalty contact set take none: K is made without the
// contacts' stiffness, and with a set scattered over the body (every seventh vertex 10^4
// times stiffer) the correction, even with the set left out of it, took FSAI's 17 iterations
// to 28.
// Dense (`preconditioner` 2): for bodies small enough, the loop multiplies by S^-1 itself, row
// by row (row v at `fsai_inverse_offset + dense_stride() v` in floats), in place of
// G^T G: a solve from zero then stops after one iteration, or a few where the step's matrix
// has moved from the one inverted (damping, a few handles, contacts). S^-1 comes as
// D + sum_g u_g u_g^T / e_g (u_g 1 at the vertices of free part g), D's row v then 1 / e_g
// of v's group (src/backend/projective.rs, `dense_inverse`): a free stiff part's S^-1 in f32
// keeps only its translations, D the elastic part, and the product adds each row's
// translation from its group's sum of the vector it multiplies, formed by every row as it
// reads the tiles.
// G (and S^-1) is made for the matrix without penalty contacts, whose stiffness can exceed the
// rest of a diagonal 10^4-fold, so the vertices in the contact set (`contact_flags`) are
// preconditioned by Jacobi and the rest by E G^T G E (E S^-1 E), E dropping the contact set:
// the two blocks of a block diagonal, each positive definite, so still a preconditioner for CG.
//
// How two dispatches suffice without float atomics or a separate reduction pass:
// - every workgroup of a kernel sums the previous kernel's per-workgroup partials itself, in
//   the same fixed order, so all of them hold the same bits of r.r, r.z or p.Ap;
// - `product` forms the new direction p = z + beta p on the fly (it reads the old p from
//   `p_in` and writes the new one to `p_out`; the host swaps the two every iteration), so no
//   pass of its own is needed;
// - the scalars ping-pong the same way: a kernel reads `scalars_in`, and workgroup 0 writes
//   `scalars_out`, which no other workgroup of that dispatch reads except fields it leaves.
// An iteration that is not running does nothing, so the host records a fixed number of
// iterations and reads the status once. Where the host dispatches the loop indirectly, the
// iterations recorded past the solve's end dispatch no workgroups at all (see
// `product_dispatches`).
//
// Lanes: `params.lanes` invocations (a power of two dividing the workgroup) share a row of
// every walk over the matrix's rows, each taking every lanes-th entry of it; a workgroup
// serves INVOCATIONS / lanes rows at a time, and a warp's invocations serve consecutive rows,
// so their reads of the sliced matrix stay coalesced. With one lane a body of a few thousand
// vertices fills a few dozen workgroups whose invocations each wait on a chain of 12-36
// dependent loads: latency, not bandwidth, bounds those kernels (on an H200 at 3.7K
// vertices, 17 us a dispatch with one lane, 10.7 us with 16). The one-workgroup solve walks
// its rows the same way, in passes, with 1 024 invocations where the device allows.

#import shared/reduce
#import shared/matrix
#import shared/coupling_product

struct Params {
    vertex_count: u32,
    // The gather's partials (one per WORKGROUP vertices), for the forcing term.
    partial_count: u32,
    max_iterations: u32,
    // Relative residual to reach; with `forcing` 1 it is computed from the linearization
    // (see `forcing_term`), and this is its cap.
    tolerance: f32,
    forcing: u32,
    // Newton's gradient tolerance (N): at or below it there is nothing to solve.
    gradient_tolerance: f32,
    // Self-contact's boundary vertex count (0: none; its linearization's records are set 0),
    // and 1 where the step's friction records (set 2) are part of the matrix.
    surface_count: u32,
    friction: u32,
    // 0 Jacobi, 1 FSAI: M = G^T G from `fsai_inverse_offset` on in `fsai_inverse` (the buffer
    // holds two, a stabilized step's two step weights); 2 dense: S^-1 from there on. The
    // one-workgroup solve takes Jacobi only.
    preconditioner: u32,
    fsai_inverse_offset: u32,
    // Invocations per row in the loop's kernels.
    lanes: u32,
    // 0: start from zero; 1 or 2: from the Galerkin combination of the last one or two
    // solutions (see the header).
    warm: u32,
    // 1: the loop's `finish` takes the step x += direction (local/global's global steps
    // without colliders, whose solution is the step).
    advance: u32,
    // The iterations recorded by the end of the chunk being run (set per chunk): with
    // `advance`, whose solves are not read on, the last one's update forms no z.
    recorded_to: u32,
    // The coarse correction's clusters (0: none), and where the latest K^-1 starts in
    // `coarse_inverse` (in vec4s).
    coarse_clusters: u32,
    coarse_offset: u32,
    // A free body's solve split along its translations (see `deflate`), `finish` adding the
    // translation to the step: 1 (SPLIT_PROJECTIVE) local/global's, whose explicit inverses
    // leave their translation out; 2 (SPLIT_BLOCKS) Newton's and mixed FEM's Jacobi solves,
    // whose `finish` puts b back.
    translation: u32,
    // The translation groups split off: the model's free parts (`translation_groups`).
    translation_groups: u32,
}

const SPLIT_PROJECTIVE: u32 = 1u;
const SPLIT_BLOCKS: u32 = 2u;
// Twin of src/backend/topology.rs's.
const NO_GROUP: u32 = 0xffffffffu;

const FSAI: u32 = 1u;
const DENSE: u32 = 2u;

// The loop's preconditioner multiplies by an explicit matrix (FSAI's G^T G, or S^-1), which
// needs the new r at other vertices than its own.
fn explicit_inverse() -> bool {
    return params.preconditioner == FSAI || params.preconditioner == DENSE;
}

struct Scalars {
    rz: f32,
    rr: f32,
    threshold_squared: f32,
    relative_tolerance: f32,
    // Iterations completed.
    iterations: u32,
    state: u32,
    // 1 once `product` has run (its next reader counts the update that followed it).
    started: u32,
    // 1 when the last update met non-positive curvature.
    negative: u32,
    // The pipelined loop's last step length (its recurrence for p.Ap needs it).
    alpha: f32,
}

const RUNNING: u32 = 0u;
const CONVERGED: u32 = 1u;
const NEGATIVE_FIRST: u32 = 2u;
const NEGATIVE_LATER: u32 = 3u;
const LIMIT: u32 = 4u;

@group(0) @binding(0) var<uniform> params: Params;

@group(1) @binding(0) var<storage, read> row_offsets: array<u32>;
@group(1) @binding(1) var<storage, read> diagonal: array<u32>;
@group(1) @binding(2) var<storage, read> row_slices: array<u32>;
@group(1) @binding(3) var<storage, read> slot_columns: array<u32>;
// M = G^T G's row offsets (n + 1), then, in the matrix's sliced layout at the matrix's
// positions (entry k of the row at position p in slot slice_base(p / SLICE) + SLICE k +
// p % SLICE), its slice bases and each slot's column.
@group(1) @binding(4) var<storage, read> fsai_inverse_pattern: array<u32>;

// The coarse correction's clusters: their members' offsets (clusters + 1) then the members
// (free vertices, by cluster), and each member's weights on its cluster's four modes.
@group(1) @binding(5) var<storage, read> coarse_members: array<u32>;
@group(1) @binding(6) var<storage, read> coarse_weights: array<vec4<f32>>;

// The iterate (displacements), for `advance`.
@group(2) @binding(0) var<storage, read_write> x: array<f32>;

@group(3) @binding(0) var<storage, read> blocks: array<f32>;
// The right-hand side, and the solution (the Newton direction).
@group(3) @binding(1) var<storage, read_write> rhs: array<f32>;
@group(3) @binding(2) var<storage, read_write> direction: array<f32>;
@group(3) @binding(3) var<storage, read_write> r: array<f32>;
@group(3) @binding(4) var<storage, read_write> z: array<f32>;
@group(3) @binding(5) var<storage, read> p_in: array<f32>;
@group(3) @binding(6) var<storage, read_write> p_out: array<f32>;
@group(3) @binding(7) var<storage, read_write> ap: array<f32>;
@group(3) @binding(8) var<storage, read_write> inverse_diagonal: array<f32>;
// Per workgroup (r.r, r.z), written by `setup` and `update`, read by `product`.
@group(3) @binding(9) var<storage, read_write> residual_partials: array<vec2<f32>>;
// Per workgroup p.Ap, written by `product`, read by `update`.
@group(3) @binding(10) var<storage, read_write> curvature_partials: array<f32>;
@group(3) @binding(11) var<storage, read_write> scalars_in: Scalars;
@group(3) @binding(12) var<storage, read_write> scalars_out: Scalars;
// The gather's per-workgroup (energy, |g|^2, force scale, noise), for the forcing term.
@group(3) @binding(13) var<storage, read> gather_partials: array<vec4<f32>>;
@group(3) @binding(14) var<storage, read> coupling_records: array<vec4<f32>>;
@group(3) @binding(15) var<storage, read> coupling_offsets: array<u32>;
@group(3) @binding(16) var<storage, read> coupling_list: array<u32>;
// The new r while neighbours still read the old one (FSAI and dense), and M = G^T G by slot
// or S^-1 by row.
@group(3) @binding(17) var<storage, read_write> fsai_y: array<f32>;
@group(3) @binding(18) var<storage, read> fsai_inverse: array<vec4<f32>>;
@group(3) @binding(19) var<storage, read> contact_flags: array<u32>;
// Per workgroup, the warm start's (b.d1, d1.S d1, b.b, 0) and (b.d2, d1.S d2, d2.S d2, 0),
// written by `warm_product`.
@group(3) @binding(20) var<storage, read_write> warm_partials: array<vec4<f32>>;
// The solution before the last (d2), and S d2.
@group(3) @binding(21) var<storage, read_write> earlier_direction: array<f32>;
@group(3) @binding(22) var<storage, read_write> earlier_product: array<f32>;
// The pipelined loop's direction p, w = A u and A q, 3n values each (see `pipelined`).
@group(3) @binding(23) var<storage, read_write> pipelined_vectors: array<f32>;
// The loop's indirect dispatch arguments (workgroups x, y, z), each a ring of entries:
// iteration k's `product` is dispatched from entry k % ring of `product_dispatches`, its
// `update` from that of `update_dispatches`. `setup` arms every entry with its own grid, the
// loop's. The `product` that finds the solve stopped empties every other entry of
// `update_dispatches`, and its own `update`, which still runs, empties
// `product_dispatches`: every iteration recorded after it dispatches nothing. (A dispatch
// may not write the buffer it is dispatched from, hence two rings; the one a kernel is
// dispatched from is bound to a placeholder there.)
@group(3) @binding(24) var<storage, read_write> product_dispatches: array<u32>;
@group(3) @binding(25) var<storage, read_write> update_dispatches: array<u32>;
// K^-1 row-major (4 clusters floats a row, a vec4 per cluster), a factor per step weight;
// Z^T r per cluster and coordinate (3 k + c, a vec4 of the four modes); per cluster its
// share of r.C r.
@group(3) @binding(26) var<storage, read> coarse_inverse: array<vec4<f32>>;
@group(3) @binding(27) var<storage, read_write> coarse_restricted: array<vec4<f32>>;
@group(3) @binding(28) var<storage, read_write> coarse_partials: array<f32>;
// The split along the translations (`deflate`): the local/global matrix's vertex diagonal,
// per chunk of a group's vertices the sums of b and of the vertex blocks (three vec4s), and
// each group's translation taken out of b.
@group(3) @binding(29) var<storage, read> projective_diagonal: array<f32>;
@group(3) @binding(30) var<storage, read_write> translation_partials: array<vec4<f32>>;
@group(3) @binding(31) var<storage, read_write> translation: array<vec4<f32>>;
// Newton's split: the gather's vertex blocks (the lagged damping's among them; row-major 3x3
// per vertex), and b before it was deflated.
@group(3) @binding(32) var<storage, read> vertex_blocks: array<f32>;
@group(3) @binding(33) var<storage, read_write> rhs_saved: array<f32>;
// b's vertex terms' part (the gather's `vertex_rhs`).
@group(3) @binding(34) var<storage, read> vertex_rhs: array<f32>;
// The translation group of every vertex: its free part's (`NO_GROUP` where a pin holds its
// part). The groups' vertices in chunks of at most WORKGROUP, a chunk in one group
// (`translation_chunks` in src/backend/gpu/buffers.rs): per group the range of its chunks
// (translation_groups + 1 offsets), per chunk the range of its members (two u32), then the
// members, by group.
@group(1) @binding(7) var<storage, read> translation_groups: array<u32>;
@group(1) @binding(8) var<storage, read> translation_chunks: array<u32>;

// Each vector's three coordinates at vertex v, one function per buffer: a kernel binds only
// the buffers it reads (`shaders::entry_bindings`), and a switch over them would bind all.
// (WGSL lets no storage pointer be passed to a function, so the buffer cannot be a parameter.)
fn rhs3(v: u32) -> vec3<f32> {
    return vec3<f32>(rhs[3u * v], rhs[3u * v + 1u], rhs[3u * v + 2u]);
}
fn r3(v: u32) -> vec3<f32> {
    return vec3<f32>(r[3u * v], r[3u * v + 1u], r[3u * v + 2u]);
}
fn z3(v: u32) -> vec3<f32> {
    return vec3<f32>(z[3u * v], z[3u * v + 1u], z[3u * v + 2u]);
}
fn p_in3(v: u32) -> vec3<f32> {
    return vec3<f32>(p_in[3u * v], p_in[3u * v + 1u], p_in[3u * v + 2u]);
}
fn ap3(v: u32) -> vec3<f32> {
    return vec3<f32>(ap[3u * v], ap[3u * v + 1u], ap[3u * v + 2u]);
}
fn direction3(v: u32) -> vec3<f32> {
    return vec3<f32>(direction[3u * v], direction[3u * v + 1u], direction[3u * v + 2u]);
}
fn earlier_direction3(v: u32) -> vec3<f32> {
    return vec3<f32>(earlier_direction[3u * v], earlier_direction[3u * v + 1u], earlier_direction[3u * v + 2u]);
}
fn earlier_product3(v: u32) -> vec3<f32> {
    return vec3<f32>(earlier_product[3u * v], earlier_product[3u * v + 1u], earlier_product[3u * v + 2u]);
}
// The pipelined loop's vector `which` (0 p, 1 w, 2 A q) at v.
fn pipelined3(v: u32, which: u32) -> vec3<f32> {
    let j = 3u * (params.vertex_count * which + v);
    return vec3<f32>(pipelined_vectors[j], pipelined_vectors[j + 1u], pipelined_vectors[j + 2u]);
}

// A loop kernel's invocation: its row, the row's position in the matrix's layout (see
// `shared/matrix`), and its lane in the row. Consecutive invocations take consecutive
// positions: past the last, the position is its own row.
struct Row {
    v: u32,
    lane: u32,
    at: u32,
}

// The rows a workgroup serves at once.
fn rows_at_once() -> u32 {
    return INVOCATIONS / params.lanes;
}

// The invocation's row and lane in the `slot`-th set of rows (the loop's workgroup, or the
// one-workgroup solve's sweep).
fn row_of(slot: u32, lid: u32) -> Row {
    let at = slot * rows_at_once() + lid % rows_at_once();
    return Row(select(at, row_at(at), at < params.vertex_count), lid / rows_at_once(), at);
}

// The loop's partial sums: one per workgroup.
fn loop_partials() -> u32 {
    return (params.vertex_count + rows_at_once() - 1u) / rows_at_once();
}

// Each row's lanes' values summed in lane order, to the row's lane 0 (the other lanes get
// zero), through the reduction's workgroup memory; every invocation must call it.
fn row_total(lid: u32, value: vec3<f32>) -> vec3<f32> {
    if (params.lanes == 1u) {
        return value;
    }
    reduction[lid] = vec4<f32>(value, 0.0);
    workgroupBarrier();
    var total = vec3<f32>(0.0);
    if (lid < rows_at_once()) {
        for (var k = 0u; k < params.lanes; k++) {
            total += reduction[lid + k * rows_at_once()].xyz;
        }
    }
    workgroupBarrier();
    return total;
}

// A lane's share of row v of the matrix times the direction, and of the couplings on lane 0.
fn product_share(row: Row) -> vec3<f32> {
    let v = row.v;
    var acc = vec3<f32>(0.0);
    for (var j = row.lane; j < row_offsets[v + 1u] - row_offsets[v]; j += params.lanes) {
        let entry = position_slot(row.at, j);
        acc += block_times(entry, coupled_vector(slot_columns[entry]));
    }
    if (row.lane == 0u) {
        acc += couplings_times(v);
    }
    return acc;
}

// Row `row` of the matrix times the vector `product_share` multiplies, summed over the row's
// lanes to its lane 0 (zero past the last row); every invocation must call it.
fn row_product(lid: u32, row: Row) -> vec3<f32> {
    var acc = vec3<f32>(0.0);
    if (row.v < params.vertex_count) {
        acc = product_share(row);
    }
    return row_total(lid, acc);
}

// The block in `slot` times u.
fn block_times(slot: u32, u: vec3<f32>) -> vec3<f32> {
    return vec3<f32>(
        blocks[matrix_entry(slot, 0u)] * u.x + blocks[matrix_entry(slot, 1u)] * u.y + blocks[matrix_entry(slot, 2u)] * u.z,
        blocks[matrix_entry(slot, 3u)] * u.x + blocks[matrix_entry(slot, 4u)] * u.y + blocks[matrix_entry(slot, 5u)] * u.z,
        blocks[matrix_entry(slot, 6u)] * u.x + blocks[matrix_entry(slot, 7u)] * u.y + blocks[matrix_entry(slot, 8u)] * u.z,
    );
}

// The starting residual (`from_rhs`; b when not warm), or r - alpha Ap, at vertex c.
fn residual_at(c: u32, alpha: f32, from_rhs: bool) -> vec3<f32> {
    if (from_rhs) {
        return starting_residual(c);
    }
    return r3(c) - alpha * ap3(c);
}

// The warm start's (c1, c2) (zero when not warm), set by `setup`.
var<private> warm_multiples: vec2<f32>;

// b - c1 S d1 - c2 S d2 at v (b when not warm).
fn starting_residual(v: u32) -> vec3<f32> {
    var residual = rhs3(v);
    if (params.warm != 0u) {
        residual -= warm_multiples.x * ap3(v);
    }
    if (params.warm == 2u) {
        residual -= warm_multiples.y * earlier_product3(v);
    }
    return residual;
}

// The warm start's dot products (see `warm_partials`).
struct WarmDots {
    last: vec4<f32>,
    earlier: vec4<f32>,
}

// (c1, c2) from the summed dots: the 2x2 Galerkin system's solution where the two directions
// are far enough from parallel for f32 (the Gram determinant above 1e-4 of its diagonal's
// product), else (b.d1 / d1.S d1, 0), and zero unless d1.S d1 is positive.
fn galerkin_multiples(dots: WarmDots) -> vec2<f32> {
    let first = dots.last;
    let second = dots.earlier;
    let c1 = first.x / first.y;
    let one = vec2<f32>(select(0.0, c1, first.y > 0.0 && abs(c1) < 3.0e38), 0.0);
    let det = first.y * second.z - second.y * second.y;
    let both = vec2<f32>(first.x * second.z - second.x * second.y, first.y * second.x - second.y * first.x) / det;
    let usable = params.warm == 2u && first.y > 0.0 && second.z > 0.0 && det > 1e-4 * first.y * second.z
        && all(abs(both) < vec2<f32>(3.0e38));
    return select(one, both, usable);
}

// Row v of the warm start: S d1 (`last`, into `ap`) and S d2 (`earlier`, into
// `earlier_product`); returns its dot products.
fn warm_row(v: u32, last: vec3<f32>, earlier: vec3<f32>) -> WarmDots {
    for (var c = 0u; c < 3u; c++) {
        ap[3u * v + c] = last[c];
        earlier_product[3u * v + c] = earlier[c];
    }
    let b = rhs3(v);
    let d1 = direction3(v);
    let d2 = earlier_direction3(v);
    return WarmDots(
        vec4<f32>(dot(b, d1), dot(d1, last), dot(b, b), 0.0),
        vec4<f32>(dot(b, d2), dot(d1, earlier), dot(d2, earlier), 0.0),
    );
}

// Row `row`'s S d1 and (with `warm` 2) S d2, on its lane 0; every invocation must call it.
fn warm_products(lid: u32, row: Row) -> array<vec3<f32>, 2> {
    multiplied = LAST_SOLUTION;
    let last = row_product(lid, row);
    var earlier = vec3<f32>(0.0);
    if (params.warm == 2u) {
        multiplied = EARLIER_SOLUTION;
        earlier = row_product(lid, row);
    }
    return array<vec3<f32>, 2>(last, earlier);
}

// The sum of every workgroup's warm-start partials, in a fixed order: the same bits in every
// workgroup.
fn all_warm_partials(lid: u32) -> WarmDots {
    var last = vec4<f32>(0.0);
    var earlier = vec4<f32>(0.0);
    for (var i = lid; i < loop_partials(); i += INVOCATIONS) {
        last += warm_partials[2u * i];
        earlier += warm_partials[2u * i + 1u];
    }
    return WarmDots(workgroup_sum(lid, last), workgroup_sum(lid, earlier));
}

// Vertex v is in the penalty contact set.
fn in_contact(v: u32) -> bool {
    return contact_flags[v] != 0u;
}

// Jacobi's row v times u.
fn jacobi_times(v: u32, u: vec3<f32>) -> vec3<f32> {
    let i = 3u * v;
    return vec3<f32>(inverse_diagonal[i], inverse_diagonal[i + 1u], inverse_diagonal[i + 2u]) * u;
}

// A lane's share of row v of E M E times b or r - alpha Ap, with M = G^T G (zero in the
// contact set, whose rows take Jacobi's).
fn inverse_times(row: Row, alpha: f32, from_rhs: bool) -> vec3<f32> {
    var acc = vec3<f32>(0.0);
    if (in_contact(row.v)) {
        return acc;
    }
    let n = params.vertex_count;
    let length = fsai_inverse_pattern[row.v + 1u] - fsai_inverse_pattern[row.v];
    let base = fsai_inverse_pattern[n + 1u + row.at / SLICE] + row.at % SLICE;
    let columns = n + 1u + (n + SLICE - 1u) / SLICE;
    for (var k = row.lane; k < length; k += params.lanes) {
        let e = base + SLICE * k;
        let c = fsai_inverse_pattern[columns + e];
        let m = fsai_inverse[(params.fsai_inverse_offset + e) / 4u][(params.fsai_inverse_offset + e) % 4u];
        acc += select(m, 0.0, in_contact(c)) * residual_at(c, alpha, from_rhs);
    }
    return acc;
}

// The columns of E (b or r - alpha Ap) that the dense product shares at a time, four to a
// vec4, one array per coordinate: each is formed once per workgroup, not once per row.
const DENSE_TILE_QUADS: u32 = 256u;
var<workgroup> dense_x: array<vec4<f32>, DENSE_TILE_QUADS>;
var<workgroup> dense_y: array<vec4<f32>, DENSE_TILE_QUADS>;
var<workgroup> dense_z: array<vec4<f32>, DENSE_TILE_QUADS>;
// The quads' columns' translation groups, a byte each (`dense_group_byte`).
var<workgroup> dense_groups: array<u32, DENSE_TILE_QUADS>;
// Whether a dense kernel multiplies at all (the same in every invocation, as the workgroup
// must know).
var<workgroup> dense_wanted: u32;

// Column c of E (b or r - alpha Ap): zero in the contact set and past the last vertex.
fn dense_column(c: u32, alpha: f32, from_rhs: bool) -> vec3<f32> {
    if (c >= params.vertex_count || in_contact(c)) {
        return vec3<f32>(0.0);
    }
    return residual_at(c, alpha, from_rhs);
}

// Column c's translation group as a byte (0xff for none and past the last vertex; a model
// of more free parts takes no dense inverse, `DENSE_GROUPS` in src/backend/gpu/pcg.rs).
fn dense_group_byte(c: u32) -> u32 {
    if (c >= params.vertex_count) {
        return 0xffu;
    }
    return min(translation_groups[c], 0xffu);
}

// The sum of the tile's quad `k` over the columns of translation group `g` (as a byte).
fn tile_sum(k: u32, g: u32) -> vec3<f32> {
    let packed = dense_groups[k];
    let bytes = vec4<u32>(packed, packed >> 8u, packed >> 16u, packed >> 24u) & vec4<u32>(0xffu);
    let mask = select(vec4<f32>(0.0), vec4<f32>(1.0), bytes == vec4<u32>(g));
    return vec3<f32>(dot(mask, dense_x[k]), dot(mask, dense_y[k]), dot(mask, dense_z[k]));
}

// Quad `quad` of S^-1's row of the workgroup's dense row `row` times the tile's quad `k`.
fn dense_quad(row: u32, quad: u32, k: u32) -> vec3<f32> {
    let m = fsai_inverse[row + quad];
    return vec3<f32>(dot(m, dense_x[k]), dot(m, dense_y[k]), dot(m, dense_z[k]));
}

// Loads the tile of columns from quad `first` on (`count` quads) into the workgroup's arrays:
// E's columns of b or r - alpha Ap, or (`own`) of b's vertex terms' part.
fn load_dense_tile(lid: u32, first: u32, count: u32, alpha: f32, from_rhs: bool, own: bool) {
    for (var k = lid; k < count; k += WORKGROUP) {
        let c = 4u * (first + k);
        let e0 = tile_column(c, alpha, from_rhs, own);
        let e1 = tile_column(c + 1u, alpha, from_rhs, own);
        let e2 = tile_column(c + 2u, alpha, from_rhs, own);
        let e3 = tile_column(c + 3u, alpha, from_rhs, own);
        dense_x[k] = vec4<f32>(e0.x, e1.x, e2.x, e3.x);
        dense_y[k] = vec4<f32>(e0.y, e1.y, e2.y, e3.y);
        dense_z[k] = vec4<f32>(e0.z, e1.z, e2.z, e3.z);
        dense_groups[k] = dense_group_byte(c) | dense_group_byte(c + 1u) << 8u
            | dense_group_byte(c + 2u) << 16u | dense_group_byte(c + 3u) << 24u;
    }
}

// Column c of E (b or r - alpha Ap), or (`own`) of b's vertex terms' part (the gather's
// `vertex_rhs`): zero in the contact set and past the last vertex.
fn tile_column(c: u32, alpha: f32, from_rhs: bool, own: bool) -> vec3<f32> {
    if (!own) {
        return dense_column(c, alpha, from_rhs);
    }
    if (c >= params.vertex_count || in_contact(c)) {
        return vec3<f32>(0.0);
    }
    return vec3<f32>(vertex_rhs[3u * c], vertex_rhs[3u * c + 1u], vertex_rhs[3u * c + 2u]);
}

// The workgroup's rows of E S^-1 E times b or r - alpha Ap: each invocation returns the row
// it serves in `row_of` on lane 0, zero past the last row and in the contact set (whose rows
// take Jacobi's). S^-1's rows are `dense_stride()` floats apart, so that they are read a vec4
// at a time, and here a row's lanes are consecutive invocations (not `row_of`'s), so that a
// warp reads each row's span contiguously. Every invocation must call it.
// With `own_translation` (the direct solve, of b) a free part's translation, u_g u_g^T b / e_g,
// sums b's vertex terms' part, not b: the elements' forces in b sum to zero over the part in
// exact arithmetic, and in f32 to their rounding, which for a stiff body is far more than the
// rest (see the split below). From b, a free steel-stiff cube's first global step ended 0.19 m
// from the CPU's with one lane a row, and with the 16 of a small body on hardware its
// local/global solve diverged, G from 6e8 to 2e21 J.
fn dense_rows_product(lid: u32, slot: u32, alpha: f32, from_rhs: bool, own_translation: bool) -> vec3<f32> {
    let n = params.vertex_count;
    let lanes = params.lanes;
    let at = slot * rows_at_once() + lid / lanes;
    let v = select(at, row_at(at), at < n);
    let multiplies = v < n && !in_contact(v);
    let lane = lid % lanes;
    let quads = dense_stride() / 4u;
    let row = (params.fsai_inverse_offset + dense_stride() * v) / 4u;
    var acc = vec3<f32>(0.0);
    // The sum of E's columns in the row's translation group, for S^-1's part along it (none
    // split off, the model has free parts).
    var columns = vec3<f32>(0.0);
    let g = select(0xffu, dense_group_byte(v), v < n);
    let translating = params.translation == 0u && params.translation_groups > 0u;
    let own = translating && own_translation;
    for (var first = 0u; first < quads; first += DENSE_TILE_QUADS) {
        let count = min(DENSE_TILE_QUADS, quads - first);
        workgroupBarrier();
        load_dense_tile(lid, first, count, alpha, from_rhs, false);
        workgroupBarrier();
        if (multiplies) {
            // Eight loads in flight per invocation: the product is bound by their latency. (With
            // four, an H200 streamed S^-1 at 1.8-2 TB/s, in about two workgroups of 256 an SM.)
            var k = lane;
            for (; k + 7u * lanes < count; k += 8u * lanes) {
                let a = dense_quad(row, first + k, k);
                let b = dense_quad(row, first + k + lanes, k + lanes);
                let c = dense_quad(row, first + k + 2u * lanes, k + 2u * lanes);
                let d = dense_quad(row, first + k + 3u * lanes, k + 3u * lanes);
                let e = dense_quad(row, first + k + 4u * lanes, k + 4u * lanes);
                let f = dense_quad(row, first + k + 5u * lanes, k + 5u * lanes);
                let h = dense_quad(row, first + k + 6u * lanes, k + 6u * lanes);
                let i = dense_quad(row, first + k + 7u * lanes, k + 7u * lanes);
                acc += ((a + b) + (c + d)) + ((e + f) + (h + i));
                if (translating && !own) {
                    var sum = vec3<f32>(0.0);
                    for (var j = 0u; j < 8u; j++) {
                        sum += tile_sum(k + j * lanes, g);
                    }
                    columns += sum;
                }
            }
            for (; k < count; k += lanes) {
                acc += dense_quad(row, first + k, k);
                if (translating && !own) {
                    columns += tile_sum(k, g);
                }
            }
        }
        if (own) {
            workgroupBarrier();
            load_dense_tile(lid, first, count, 0.0, true, true);
            workgroupBarrier();
            if (multiplies) {
                for (var k = lane; k < count; k += lanes) {
                    columns += tile_sum(k, g);
                }
            }
        }
    }
    // D's product and the translation, u_g u_g^T / e_g times E (`1 / e_g` ends D's row, 0 for
    // a vertex of no group).
    if (multiplies && translating) {
        let at_e = params.fsai_inverse_offset + dense_stride() * v + n;
        acc += columns * fsai_inverse[at_e / 4u][at_e % 4u];
    }
    // Each row's lanes summed in lane order, to the invocation `row_of` gives lane 0 of it.
    if (lanes == 1u) {
        return acc;
    }
    reduction[lid] = vec4<f32>(acc, 0.0);
    workgroupBarrier();
    var total = vec3<f32>(0.0);
    if (lid < rows_at_once()) {
        for (var k = 0u; k < lanes; k++) {
            total += reduction[lid * lanes + k].xyz;
        }
    }
    workgroupBarrier();
    return total;
}

// The floats between S^-1's rows: n + 1 (D's row, then 1 / e_g) rounded up to a multiple
// of four.
fn dense_stride() -> u32 {
    return (params.vertex_count + 4u) / 4u * 4u;
}

fn store_y(v: u32, y: vec3<f32>) {
    for (var c = 0u; c < 3u; c++) {
        fsai_y[3u * v + c] = y[c];
    }
}

fn store_z(v: u32, zv: vec3<f32>) {
    for (var c = 0u; c < 3u; c++) {
        z[3u * v + c] = zv[c];
    }
}

// The new search direction at vertex u: z + beta p (z alone on the first iteration).
fn direction_at(u: u32, beta: f32, first: bool) -> vec3<f32> {
    if (first) {
        return z3(u);
    }
    return z3(u) + beta * p_in3(u);
}

// The vector `product_share` multiplies (`multiplied`): p formed on the fly (`product`), p in
// workgroup memory (`solve_small`), the last or earlier solution (the warm start), or the
// pipelined loop's u = P r (its start) and m = P w (in `p_in`).
const P_ON_THE_FLY: u32 = 0u;
const P_ITSELF: u32 = 1u;
const LAST_SOLUTION: u32 = 2u;
const EARLIER_SOLUTION: u32 = 3u;
const PRECONDITIONED_RESIDUAL: u32 = 4u;
const PIPELINED_M: u32 = 5u;
var<private> multiplied: u32;
var<private> coupled_beta: f32;
var<private> coupled_first: bool;

fn coupled_vector(u: u32) -> vec3<f32> {
    switch multiplied {
        case P_ITSELF: { return p_small3(u); }
        case LAST_SOLUTION: { return direction3(u); }
        case EARLIER_SOLUTION: { return earlier_direction3(u); }
        case PRECONDITIONED_RESIDUAL: { return z3(u); }
        case PIPELINED_M: { return p_in3(u); }
        default: { return direction_at(u, coupled_beta, coupled_first); }
    }
}

// Row v of the couplings (self-contact and its friction) times the direction.
fn couplings_times(v: u32) -> vec3<f32> {
    var row = vec3<f32>(0.0);
    if (params.surface_count != 0u) {
        row += coupling_row(v, coupling_set(0u, params.surface_count, params.vertex_count));
    }
    if (params.friction != 0u) {
        row += coupling_row(v, coupling_set(FRICTION_SET, params.surface_count, params.vertex_count));
    }
    return row;
}

// The sum of every workgroup's residual partials (r.r, r.z), with the coarse correction's
// share of r.z, in a fixed order (strided per invocation, then the tree): the same bits in
// every workgroup.
fn all_residual_partials(lid: u32) -> vec2<f32> {
    var sum = vec2<f32>(0.0);
    for (var i = lid; i < loop_partials(); i += INVOCATIONS) {
        sum += residual_partials[i];
    }
    for (var k = lid; k < params.coarse_clusters; k += INVOCATIONS) {
        sum.y += coarse_partials[k];
    }
    return workgroup_sum(lid, vec4<f32>(sum, 0.0, 0.0)).xy;
}

// Cluster `k`'s members (a range of `coarse_members`).
fn cluster_members(k: u32) -> vec2<u32> {
    return vec2<u32>(coarse_members[k], coarse_members[k + 1u]);
}

// Z^T r at cluster k, by a workgroup of `setup` or `update` past the loop's (one per
// cluster), r the residual the kernel forms (`residual_at`: the start's, or r - alpha Ap).
// An update that does not descend (stopped, or non-positive curvature) leaves it: the
// `coarse_prolong` after it then writes the shares of r.z it wrote before, so that a stopped
// solve's status has the same bits whether or not its idle iterations were dispatched (z is
// not read again). Every invocation of the workgroup must call it.
fn restrict_cluster(lid: u32, k: u32, descending: bool, alpha: f32, from_rhs: bool) {
    if (!descending) {
        return;
    }
    var sums = array<vec4<f32>, 3>(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    let members = cluster_members(k);
    for (var m = members.x + lid; m < members.y; m += INVOCATIONS) {
        let v = coarse_members[params.coarse_clusters + 1u + m];
        let w = coarse_weights[m];
        let rv = residual_at(v, alpha, from_rhs);
        for (var c = 0u; c < 3u; c++) {
            sums[c] += w * rv[c];
        }
    }
    for (var c = 0u; c < 3u; c++) {
        let total = workgroup_sum(lid, sums[c]);
        if (lid == 0u) {
            coarse_restricted[3u * k + c] = total;
        }
    }
}

// K^-1 = D + sum_g c_g c_g^T / e_g, c_g the constant modes of translation group g's clusters
// (src/backend/coarse.rs: f32 entries of K^-1 of a stiff free body keep only its
// translation). After D, a vec4 per cluster: 1 / e_g of its group g (0 for none), g (-1).
// Cluster k's c = rows 4k..4k+3 of K^-1 times Z^T r (a workgroup per cluster, an invocation
// per cluster of K^-1's columns), then z += Z c at its members and its share of r.C r,
// (Z^T r)_k . c.
@compute @workgroup_size(WORKGROUP)
fn coarse_prolong(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let k = workgroup_slot(group, groups);
    let clusters = params.coarse_clusters;
    // (Dispatched from the update's ring, over the loop's grid and the clusters'.)
    if (k >= clusters) {
        return;
    }
    var sums = array<vec4<f32>, 3>(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    // c_g^T Z^T r per coordinate, g cluster k's group: the sum of r over its clusters' members.
    let translations = params.coarse_offset + 4u * clusters * clusters;
    let own = coarse_inverse[translations + k];
    var constant = vec4<f32>(0.0);
    for (var l = lid; l < clusters; l += INVOCATIONS) {
        if (coarse_inverse[translations + l].y == own.y) {
            constant += vec4<f32>(coarse_restricted[3u * l].x, coarse_restricted[3u * l + 1u].x, coarse_restricted[3u * l + 2u].x, 0.0);
        }
        // The 4x4 block (k, l) of D, by rows.
        let row = params.coarse_offset + 4u * k * clusters + l;
        let block = mat4x4<f32>(
            coarse_inverse[row],
            coarse_inverse[row + clusters],
            coarse_inverse[row + 2u * clusters],
            coarse_inverse[row + 3u * clusters],
        );
        for (var c = 0u; c < 3u; c++) {
            // block's columns are K^-1's rows: q * block = (rows . q).
            sums[c] += coarse_restricted[3u * l + c] * block;
        }
    }
    var coefficients = array<vec4<f32>, 3>(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    for (var c = 0u; c < 3u; c++) {
        coefficients[c] = workgroup_sum(lid, sums[c]);
    }
    // The translation, c_g (c_g^T q) / e_g, on the constant mode.
    let moved = workgroup_sum(lid, constant) * own.x;
    for (var c = 0u; c < 3u; c++) {
        coefficients[c].x += select(moved[c], 0.0, params.translation != 0u);
    }
    let members = cluster_members(k);
    for (var m = members.x + lid; m < members.y; m += INVOCATIONS) {
        let v = coarse_members[clusters + 1u + m];
        let w = coarse_weights[m];
        for (var c = 0u; c < 3u; c++) {
            z[3u * v + c] += dot(w, coefficients[c]);
        }
    }
    if (lid == 0u) {
        var share = 0.0;
        for (var c = 0u; c < 3u; c++) {
            share += dot(coarse_restricted[3u * k + c], coefficients[c]);
        }
        coarse_partials[k] = share;
    }
}

// The pipelined loop's partials: (r.r, r.u, w.u, 0) per workgroup after the vector in the
// p ping-pong buffers, read from `p_in` and written to `p_out`.
fn pipelined_partial(slot: u32) -> vec4<f32> {
    let j = 3u * params.vertex_count + 4u * slot;
    return vec4<f32>(p_in[j], p_in[j + 1u], p_in[j + 2u], p_in[j + 3u]);
}

fn store_pipelined_partial(slot: u32, partial: vec4<f32>) {
    let j = 3u * params.vertex_count + 4u * slot;
    for (var c = 0u; c < 4u; c++) {
        p_out[j + c] = partial[c];
    }
}

fn all_pipelined_partials(lid: u32) -> vec3<f32> {
    var sum = vec4<f32>(0.0);
    for (var i = lid; i < loop_partials(); i += INVOCATIONS) {
        sum += pipelined_partial(i);
    }
    return workgroup_sum(lid, sum).xyz;
}

fn all_curvature_partials(lid: u32) -> f32 {
    var sum = 0.0;
    for (var i = lid; i < loop_partials(); i += INVOCATIONS) {
        sum += curvature_partials[i];
    }
    return workgroup_sum(lid, vec4<f32>(sum, 0.0, 0.0, 0.0)).x;
}

// The scalars after the update that followed the last `product`, given the new r.r:
// counts that iteration and decides whether to go on (the CPU twin's checks, in its order).
fn settle(s: Scalars, rr: f32) -> Scalars {
    var out = s;
    if (s.state == RUNNING && s.started != 0u) {
        out.iterations = s.iterations + 1u;
        if (s.negative != 0u) {
            out.state = select(NEGATIVE_LATER, NEGATIVE_FIRST, out.iterations == 1u);
        } else if (rr <= s.threshold_squared) {
            out.state = CONVERGED;
        } else if (out.iterations >= params.max_iterations) {
            out.state = LIMIT;
        }
    }
    out.negative = 0u;
    return out;
}

// Newton's forcing term (twin of `forcing_term` in src/backend/mod.rs): solve loosely far
// from the solution and tightly near it, min(1/2, sqrt(max(|g|, tol) / force scale)), but
// never tighter than the tolerance asks (a residual of tol / 2 is the next gradient).
fn forcing_term(gradient_norm: f32, force_scale: f32) -> f32 {
    let imbalance = max(gradient_norm, params.gradient_tolerance) / max(force_scale, 1e-30);
    let sufficient = 0.5 * params.gradient_tolerance / max(gradient_norm, 1e-30);
    return min(0.5, max(sqrt(imbalance), sufficient));
}

// The warm start's S d1 into `ap` and S d2 into `earlier_product`, with their partials;
// recorded before `setup`.
@compute @workgroup_size(WORKGROUP)
fn warm_product(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let row = row_of(slot, lid);
    let products = warm_products(lid, row);
    var dots = WarmDots(vec4<f32>(0.0), vec4<f32>(0.0));
    if (row.v < params.vertex_count && row.lane == 0u) {
        dots = warm_row(row.v, products[0], products[1]);
    }
    let last = workgroup_sum(lid, dots.last);
    let earlier = workgroup_sum(lid, dots.earlier);
    if (lid == 0u && slot < loop_partials()) {
        warm_partials[2u * slot] = last;
        warm_partials[2u * slot + 1u] = earlier;
    }
}

// direction = c1 d1 + c2 d2 (0 when not warm; d1 becomes the earlier solution), r = b - S
// direction, z = P r; partials (r.r, r.z). Jacobi or FSAI (`setup_dense`: S^-1).
@compute @workgroup_size(WORKGROUP)
fn setup(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let row = row_of(slot, lid);
    start_warm(lid);
    if (slot >= loop_partials()) {
        // A cluster's workgroup (the coarse correction's).
        restrict_cluster(lid, slot - loop_partials(), true, 0.0, true);
        arm_rings(groups, lid, slot);
        return;
    }
    var inverse_z = vec3<f32>(0.0);
    if (params.preconditioner == FSAI) {
        if (row.v < params.vertex_count) {
            inverse_z = inverse_times(row, 0.0, true);
        }
        inverse_z = row_total(lid, inverse_z);
    }
    setup_rows(groups, lid, slot, row, inverse_z);
}

// `setup` with S^-1: its own entry point, so that the others keep no tiles in workgroup
// memory (which costs an NVIDIA GPU its L1 cache).
@compute @workgroup_size(WORKGROUP)
fn setup_dense(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    start_warm(lid);
    let inverse_z = dense_rows_product(lid, slot, 0.0, true, false);
    setup_rows(groups, lid, slot, row_of(slot, lid), inverse_z);
}

// The warm start's multiples, from `warm_product`'s partials; every invocation must call it.
fn start_warm(lid: u32) {
    if (params.warm != 0u) {
        warm_multiples = galerkin_multiples(all_warm_partials(lid));
    }
}

// The setup's rows, with the preconditioner's `inverse_z` on each row's lane 0, its partials,
// and the rings' grids. Every invocation must call it.
fn setup_rows(groups: vec3<u32>, lid: u32, slot: u32, row: Row, inverse_z: vec3<f32>) {
    var sums = vec2<f32>(0.0);
    if (row.v < params.vertex_count && row.lane == 0u) {
        sums = setup_row(row.v, inverse_z);
    }
    let total = workgroup_sum(lid, vec4<f32>(sums, 0.0, 0.0));
    if (lid == 0u && slot < loop_partials()) {
        residual_partials[slot] = total.xy;
    }
    arm_rings(groups, lid, slot);
}

// Every loop kernel is dispatched over the setup's grid (the loop's workgroups, and one per
// cluster of a coarse correction).
fn arm_rings(groups: vec3<u32>, lid: u32, slot: u32) {
    let ring = arrayLength(&product_dispatches) / 3u;
    let invocations = groups.x * groups.y * groups.z * WORKGROUP;
    for (var i = slot * WORKGROUP + lid; i < ring; i += invocations) {
        for (var c = 0u; c < 3u; c++) {
            product_dispatches[3u * i + c] = groups[c];
            update_dispatches[3u * i + c] = groups[c];
        }
    }
}

// Row v of the setup: direction = c1 d1 + c2 d2 and r = b - S direction (0 and b when not
// warm; d1 kept as the earlier solution), z = P r; returns (r.r, r.z). `inverse_z` is the
// loop's row of E M E r.
fn setup_row(v: u32, inverse_z: vec3<f32>) -> vec2<f32> {
    let bv = starting_residual(v);
    let last = direction3(v);
    var start = warm_multiples.x * last;
    if (params.warm == 2u) {
        start += warm_multiples.y * earlier_direction3(v);
    }
    if (params.warm != 0u) {
        for (var c = 0u; c < 3u; c++) {
            earlier_direction[3u * v + c] = last[c];
        }
    }
    var zv = vec3<f32>(0.0);
    for (var c = 0u; c < 3u; c++) {
        // An indefinite diagonal cannot precondition CG; its magnitude still scales well.
        let a = blocks[matrix_entry(matrix_slot(v, diagonal[v] - row_offsets[v]), 4u * c)];
        let inv = select(1.0, 1.0 / abs(a), a != 0.0);
        inverse_diagonal[3u * v + c] = inv;
        direction[3u * v + c] = select(0.0, start[c], params.warm != 0u);
        r[3u * v + c] = bv[c];
        z[3u * v + c] = inv * bv[c];
        zv[c] = inv * bv[c];
    }
    if (explicit_inverse()) {
        // r's next value (moved into r by `product`).
        store_y(v, bv);
        if (!in_contact(v)) {
            zv = inverse_z;
        }
        store_z(v, zv);
    }
    return vec2<f32>(dot(bv, bv), dot(bv, zv));
}

// Row v of the update: direction += alpha p, r -= alpha Ap, z = P r; returns (r.r, r.z).
fn update_row(v: u32, alpha: f32) -> vec2<f32> {
    for (var c = 0u; c < 3u; c++) {
        let i = 3u * v + c;
        direction[i] += alpha * p_out[i];
        r[i] -= alpha * ap[i];
        z[i] = inverse_diagonal[i] * r[i];
    }
    let rv = r3(v);
    return vec2<f32>(dot(rv, rv), dot(rv, z3(v)));
}

// Row v of the update with M = G^T G or S^-1: direction += alpha p, the new r = r - alpha Ap into
// `fsai_y`, z = E M E (r - alpha Ap) (`inverse_z`), or Jacobi's in the contact set; returns
// (r.r, r.z) of the new r.
fn update_row_inverse(v: u32, alpha: f32, inverse_z: vec3<f32>) -> vec2<f32> {
    for (var c = 0u; c < 3u; c++) {
        direction[3u * v + c] += alpha * p_out[3u * v + c];
    }
    let rv = residual_at(v, alpha, false);
    store_y(v, rv);
    var zv = inverse_z;
    if (in_contact(v)) {
        zv = jacobi_times(v, rv);
    }
    store_z(v, zv);
    return vec2<f32>(dot(rv, rv), dot(rv, zv));
}

// The starting scalars from (r.r, r.z) and b.b: the tolerance (Newton's forcing term of the
// last gather, when asked) relative to |b|, and nothing to do when r = 0 or the gradient is
// already within the solver's tolerance. Every invocation of the workgroup must call it (it
// sums the gather's partials).
fn starting_scalars(lid: u32, sums: vec2<f32>, bb: f32) -> Scalars {
    let gather = gathered_sums(lid);
    var tolerance = params.tolerance;
    if (params.forcing != 0u) {
        // `tolerance` is then the cap Newton sets (`DirectionRequest::forcing_cap`).
        tolerance = min(forcing_term(sqrt(gather.y), gather.z), params.tolerance);
    }
    let done = sums.x == 0.0 || within_gradient_tolerance(gather);
    return Scalars(sums.y, sums.x, tolerance * tolerance * bb, tolerance, 0u, select(RUNNING, CONVERGED, done), 0u, 0u, 0.0);
}

// The last gather's partials summed (zero when the solve asks for neither the forcing term
// nor the gradient tolerance). Every invocation of the workgroup must call it.
fn gathered_sums(lid: u32) -> vec4<f32> {
    var gather = vec4<f32>(0.0);
    if (params.forcing != 0u || params.gradient_tolerance > 0.0) {
        for (var i = lid; i < params.partial_count; i += INVOCATIONS) {
            gather += gather_partials[i];
        }
    }
    return workgroup_sum(lid, gather);
}

// Nothing to solve: the gradient of the gather summed in `gather` is within Newton's tolerance.
fn within_gradient_tolerance(gather: vec4<f32>) -> bool {
    return params.gradient_tolerance > 0.0 && sqrt(gather.y) <= params.gradient_tolerance;
}

// The starting scalars from setup's partials (`sums`), which every workgroup of the loop's
// first kernel forms itself rather than wait on a one-workgroup dispatch.
fn starting_scalars_from_setup(lid: u32, sums: vec2<f32>) -> Scalars {
    var bb = sums.x;
    if (params.warm != 0u) {
        bb = all_warm_partials(lid).last.z;
    }
    return starting_scalars(lid, sums, bb);
}

// Settles the last update, then p = z + beta p and Ap; partials p.Ap.
@compute @workgroup_size(WORKGROUP)
fn product(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let sums = all_residual_partials(lid);
    product_after(group, groups, lid, sums, scalars_in);
}

// The first iteration's `product`, after `setup`: from the starting scalars.
@compute @workgroup_size(WORKGROUP)
fn first_product(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let sums = all_residual_partials(lid);
    product_after(group, groups, lid, sums, starting_scalars_from_setup(lid, sums));
}

// A product given the summed residual partials (`sums`) and the scalars of the kernel before
// (`last`). (The entry points read `last` themselves, so that `product` binds none of the
// start's buffers.)
fn product_after(group: vec3<u32>, groups: vec3<u32>, lid: u32, sums: vec2<f32>, last: Scalars) {
    let slot = workgroup_slot(group, groups);
    let row = row_of(slot, lid);
    let v = row.v;
    let s = settle(last, sums.x);
    let first = s.started == 0u;
    let beta = select(sums.y / s.rz, 0.0, first);
    let busy = s.state == RUNNING && v < params.vertex_count;
    coupled_beta = beta;
    coupled_first = first;
    var acc = vec3<f32>(0.0);
    if (busy) {
        acc = product_share(row);
    }
    acc = row_total(lid, acc);
    var curvature = 0.0;
    if (busy && row.lane == 0u) {
        if (explicit_inverse()) {
            // The last update's r, now that no neighbour reads the old one.
            for (var c = 0u; c < 3u; c++) {
                r[3u * v + c] = fsai_y[3u * v + c];
            }
        }
        let pv = direction_at(v, beta, first);
        for (var c = 0u; c < 3u; c++) {
            p_out[3u * v + c] = pv[c];
            ap[3u * v + c] = acc[c];
        }
        curvature = dot(pv, acc);
    }
    let total = workgroup_sum(lid, vec4<f32>(curvature, 0.0, 0.0, 0.0));
    if (lid == 0u) {
        if (slot < loop_partials()) {
            curvature_partials[slot] = total.x;
        }
        if (slot == 0u) {
            scalars_out = Scalars(sums.y, sums.x, s.threshold_squared, s.relative_tolerance, s.iterations, s.state, 1u, 0u, 0.0);
        }
    }
    if (slot == 0u && s.state != RUNNING) {
        // Stopped, at this iteration (the first to see it counted all before it): the later
        // updates dispatch nothing; this one's runs, to do the same for the later products.
        let ring = arrayLength(&update_dispatches) / 3u;
        for (var i = lid; i < ring; i += WORKGROUP) {
            if (i != s.iterations % ring) {
                for (var c = 0u; c < 3u; c++) {
                    update_dispatches[3u * i + c] = 0u;
                }
            }
        }
    }
}

// alpha = r.z / p.Ap; direction += alpha p, r -= alpha Ap, z = P r; partials (r.r, r.z). Non-positive
// curvature leaves everything as it is and flags it for the next `product`. Jacobi or FSAI
// (`update_dense`: S^-1).
@compute @workgroup_size(WORKGROUP)
fn update(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let row = row_of(slot, lid);
    let step = update_step(lid, row);
    if (slot >= loop_partials()) {
        // A cluster's workgroup (the coarse correction's).
        restrict_cluster(lid, slot - loop_partials(), step.descending, step.alpha, false);
        return;
    }
    var inverse_z = vec3<f32>(0.0);
    if (params.preconditioner == FSAI) {
        if (step.busy && !step.last) {
            inverse_z = inverse_times(row, step.alpha, false);
        }
        inverse_z = row_total(lid, inverse_z);
    }
    update_rows(lid, slot, row, step, inverse_z);
}

// `update` with S^-1 (see `setup_dense`).
@compute @workgroup_size(WORKGROUP)
fn update_dense(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let row = row_of(slot, lid);
    let step = update_step(lid, row);
    // Nor does the update after the solve stopped fill tiles.
    if (lid == 0u) {
        dense_wanted = u32(step.descending && !step.last);
    }
    var inverse_z = vec3<f32>(0.0);
    if (workgroupUniformLoad(&dense_wanted) != 0u) {
        inverse_z = dense_rows_product(lid, slot, step.alpha, false, false);
    }
    update_rows(lid, slot, row, step, inverse_z);
}

// An update's step, the same in every workgroup (each summed the same partials).
struct UpdateStep {
    running: bool,
    descending: bool,
    alpha: f32,
    // Descending, at a row of the body.
    busy: bool,
    // No later iteration reads this one's z: it is the last recorded of a solve not read on.
    last: bool,
}

fn update_step(lid: u32, row: Row) -> UpdateStep {
    let curvature = all_curvature_partials(lid);
    let running = scalars_out.state == RUNNING;
    let descending = running && curvature > 0.0;
    let alpha = select(0.0, scalars_out.rz / curvature, descending);
    let busy = descending && row.v < params.vertex_count;
    let last = params.advance != 0u && scalars_out.iterations + 1u >= params.recorded_to;
    return UpdateStep(running, descending, alpha, busy, last);
}

// The update's rows, with the explicit preconditioner's `inverse_z` on each row's lane 0, its
// partials, and the end of a stopped solve. Every invocation must call it.
fn update_rows(lid: u32, slot: u32, row: Row, step: UpdateStep, inverse_z: vec3<f32>) {
    var sums = vec2<f32>(0.0);
    if (step.busy && row.lane == 0u) {
        if (explicit_inverse()) {
            sums = update_row_inverse(row.v, step.alpha, inverse_z);
        } else {
            sums = update_row(row.v, step.alpha);
        }
    }
    let total = workgroup_sum(lid, vec4<f32>(sums, 0.0, 0.0));
    if (lid == 0u) {
        if (step.descending && slot < loop_partials()) {
            residual_partials[slot] = total.xy;
        }
        if (step.running && !step.descending && slot == 0u) {
            scalars_out.negative = 1u;
        }
    }
    if (!step.running && slot == 0u) {
        // After the product that found the solve stopped: the later products dispatch
        // nothing, and both parities' scalars hold the final status for `finish`.
        let ring = arrayLength(&product_dispatches);
        for (var i = lid; i < ring; i += WORKGROUP) {
            product_dispatches[i] = 0u;
        }
        if (lid == 0u) {
            scalars_in = scalars_out;
        }
    }
}

// A solve by S^-1 itself in one dispatch, where it is the step's exact inverse (local/global's
// free global steps without damping or moved handles, whose CG would stop after its first
// iteration at alpha = 1): direction = S^-1 b, and x += direction with `advance`, or nothing
// where the gradient is within tolerance; `scalars_out` then holds the status of a solve
// that converged in that one iteration (its residual, that of the inverse's f32 rounding, is
// not formed).
@compute @workgroup_size(WORKGROUP)
fn solve_dense(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let row = row_of(slot, lid);
    let gather = gathered_sums(lid);
    if (lid == 0u) {
        dense_wanted = u32(!within_gradient_tolerance(gather));
    }
    let solving = workgroupUniformLoad(&dense_wanted) != 0u;
    var z = vec3<f32>(0.0);
    if (solving) {
        z = dense_rows_product(lid, slot, 0.0, true, true);
    }
    if (row.v < params.vertex_count && row.lane == 0u) {
        for (var c = 0u; c < 3u; c++) {
            let i = 3u * row.v + c;
            direction[i] = z[c];
            if (params.advance != 0u) {
                x[i] += z[c];
            }
        }
    }
    if (slot == 0u && lid == 0u) {
        scalars_out = Scalars(0.0, 0.0, 0.0, params.tolerance, u32(solving), CONVERGED, 1u, 0u, 1.0);
    }
}

// After the recorded iterations: settles the last update (whose r.r is `rr`) into
// `scalars_out` (the status the host reads) and, on negative curvature at the first
// iteration, returns the right-hand side.
fn settle_solve(group: vec3<u32>, groups: vec3<u32>, lid: u32, rr: f32) {
    let slot = workgroup_slot(group, groups);
    let row = row_of(slot, lid);
    let v = row.v;
    let s = settle(scalars_in, rr);
    // Newton's split solves, which the host reads on while they run, settle their
    // translation (and b) at the `finish` that finds them stopped; local/global's are not
    // read on.
    let settles = params.translation == SPLIT_PROJECTIVE || params.translation >= SPLIT_BLOCKS && s.state != RUNNING;
    if (v < params.vertex_count && row.lane == 0u) {
        // The step's translation (none unless split).
        let moved = select(vec3<f32>(0.0), step_translation(v, s.state), settles);
        for (var c = 0u; c < 3u; c++) {
            let i = 3u * v + c;
            if (s.state == NEGATIVE_FIRST) {
                direction[i] = rhs[i];
            }
            // The step, direction and translation; a split solve that takes no step keeps
            // the translation in its direction, a step's warm start only the rest.
            if (params.advance != 0u) {
                x[i] += direction[i] + moved[c];
            } else {
                direction[i] += moved[c];
            }
            if (settles && params.translation >= SPLIT_BLOCKS) {
                rhs[i] = rhs_saved[i];
            }
        }
    }
    if (lid == 0u && slot == 0u) {
        scalars_out = s;
    }
}

// The split along the translations (`params.translation`) of a free body's matrix A (of
// each free part's, `translation_groups`, where the same holds part by part): the
// elasticity's part of A takes a translation to zero (L u = 0 for the constant u, as K u = 0
// for a Hessian of energies unchanged by translations), so A U = C, U the three translations
// and C_v at vertex v the vertex terms' block (local/global: its vertex diagonal times I;
// Newton and mixed FEM: the gather's vertex block, inertia, handles and penalty contacts,
// plus the lagged damping matrix's), and E = U^T A U the sum of those blocks. A d = b then
// splits exactly into d = w + U t, t = E^-1 U^T b, A w = b - C t, whose right-hand side sums
// to zero: the loop solves for w alone. For a body stiff at its step A's translations are so
// much softer than the rest that f32 products A p of a p holding them are round-off:
// steel-stiff cubes' local/global steps left them metres off, and their Newton steps lost
// gravity's pull (a free cube of E 1e9 Pa fell 2 m where it should fall 5). Local/global's
// explicit inverses leave their translation out (as do the dense one and the coarse
// correction in a split Newton or mixed-FEM solve); FSAI's G^T G, local, does not resolve a
// body's translation, and Jacobi's holds too little of it to matter.
// U^T b sums the elements' forces, zero in exact arithmetic, with the vertex terms': the
// step's translation is t' = E^-1 U^T b', b' the vertex terms' part of b (the gather's
// `vertex_rhs`), while `deflate` takes C t out of b with t from the whole b, so that the
// loop's right-hand side still sums to zero. From the whole b, a light body squashed stiff
// moved by E^-1 of the f32 rounding of its elastic forces: 3e9 N forces on a 0.01 kg bar
// rounded to a 3e3 N sum, and its first Newton solve moved it 6 km (`api_properties`, seed
// 11011).
// Each free part is a group with translations of its own, however many: `translation_sums`
// sums b, b' and C per chunk of a group's vertices (a workgroup each), `translation_solve` a
// group's chunks and forms its t and t' (a workgroup each), and `deflate` takes C t out of b
// (saved first where b must be put back), leaving t' for `finish`; the one-workgroup solve
// does all three itself. The exact w has no translation of its own (U^T C w = 0), but the
// loop's f32 products do not resolve one, and its w can hold a stray translation: 50 m in the
// bar's step above. `stray_sums` and `stray_solve` find it, s = E^-1 U^T C w, before each
// `finish`, which adds t' - s.
// The tolerance is relative to b - C t, the part CG solves: relative to b, the elastic part of a falling free cube's Newton solves was left
// loose, and 30 steps took 103 Newton iterations (801 CG) where they take 83 (623).

// A split solve's translation taken back out of its direction, once the step along the whole
// is taken (local/global's with contacts, whose `finish` leaves it there): the next solve's
// warm start, whose products by the matrix would not resolve it, starts from the rest, the
// loop's w as it came, stray translation and all: two free stiff cubes resting on a floor
// took 78 CG iterations a step (30 steps, lavapipe) from w less it, 61 from w, and 69 before
// the stray translation was taken out of the step (`stray_sums`). (A solve that falls back to
// b has no stray translation taken out in `finish`; local/global's matrix is positive
// definite, and its solves do not fall back.)
@compute @workgroup_size(WORKGROUP)
fn untranslate(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v = workgroup_slot(group, groups) * WORKGROUP + lid;
    if (v >= params.vertex_count) {
        return;
    }
    let t = translation_at(v, KEPT) - translation_at(v, STRAY);
    for (var c = 0u; c < 3u; c++) {
        direction[3u * v + c] -= t[c];
    }
}

// Row v of C (the block of A U at v), row-major.
fn translation_block(v: u32) -> array<f32, 9> {
    if (params.translation == SPLIT_PROJECTIVE) {
        let d = projective_diagonal[v];
        return array<f32, 9>(d, 0.0, 0.0, 0.0, d, 0.0, 0.0, 0.0, d);
    }
    var block: array<f32, 9>;
    for (var k = 0u; k < 9u; k++) {
        block[k] = vertex_blocks[9u * v + k];
    }
    return block;
}

// C_v t, C_v row-major.
fn vertex_block_times(c: array<f32, 9>, t: vec3<f32>) -> vec3<f32> {
    return vec3<f32>(
        c[0] * t.x + c[1] * t.y + c[2] * t.z,
        c[3] * t.x + c[4] * t.y + c[5] * t.z,
        c[6] * t.x + c[7] * t.y + c[8] * t.z,
    );
}

// The three vec4s the sums take at vertex v: b_v, C_v's upper triangle (it is symmetric) and
// b'_v; for the `stray` translation C_v d_v in b_v's place, d the loop's direction.
fn translation_terms(v: u32, stray: bool) -> array<vec4<f32>, 3> {
    let c = translation_block(v);
    var b = rhs3(v);
    var own = vec3<f32>(vertex_rhs[3u * v], vertex_rhs[3u * v + 1u], vertex_rhs[3u * v + 2u]);
    if (stray) {
        b = vertex_block_times(c, vec3<f32>(direction[3u * v], direction[3u * v + 1u], direction[3u * v + 2u]));
        own = vec3<f32>(0.0);
    }
    return array<vec4<f32>, 3>(vec4<f32>(b, c[0]), vec4<f32>(c[1], c[2], c[4], c[5]), vec4<f32>(c[8], own));
}

// A group's translations (see the split above): `deflated`, t = E^-1 U^T b, whose C t
// `deflate` takes out of b, and `kept`, the step's t' = E^-1 U^T b'.
struct Translation {
    deflated: vec3<f32>,
    kept: vec3<f32>,
}

// The translations from the summed terms (f = U^T b, E's upper triangle, f' = U^T b'), by
// cofactors: E is the sum of the vertex terms' positive definite blocks. The determinant is
// E's scale cubed, past f32's range where friction or a stiff contact holds a light body
// (lagged friction's blocks reach 1e13): E, f and f' are scaled first by the power of two just
// above E's largest entry, which leaves every rounding, and t, as they were where nothing
// overflows.
fn translation_from(sums: array<vec4<f32>, 3>) -> Translation {
    let unscaled = mat3x3<f32>(
        vec3<f32>(sums[0].w, sums[1].x, sums[1].y),
        vec3<f32>(sums[1].x, sums[1].z, sums[1].w),
        vec3<f32>(sums[1].y, sums[1].w, sums[2].x),
    );
    let largest = max(max(abs(unscaled[0]), abs(unscaled[1])), abs(unscaled[2]));
    let shift = vec3<i32>(-frexp(max(largest.x, max(largest.y, largest.z))).exp);
    let e = mat3x3<f32>(ldexp(unscaled[0], shift), ldexp(unscaled[1], shift), ldexp(unscaled[2], shift));
    let f = ldexp(sums[0].xyz, shift);
    let own = ldexp(sums[2].yzw, shift);
    let c0 = cross(e[1], e[2]);
    let c1 = cross(e[2], e[0]);
    let c2 = cross(e[0], e[1]);
    // An E whose columns are nearly dependent loses its determinant to cancellation in f32:
    // friction's blocks `c (I - n n^T)` dwarf a light part's mass along n, off the axes. Such a
    // part keeps its translation in the solve (t = 0, no split), whose CG resolves it as for
    // any body; a determinant at least 1e-5 times the columns' Hadamard bound (the product of
    // their lengths, which it reaches for orthogonal columns) is still good to about 1 % in f32.
    let determinant = dot(e[0], c0);
    if (!(determinant > 1e-5 * length(e[0]) * length(e[1]) * length(e[2]))) {
        return Translation(vec3<f32>(0.0), vec3<f32>(0.0));
    }
    // The rows of E^-1 are the cofactors over the determinant.
    let rows = transpose(mat3x3<f32>(c0, c1, c2));
    return Translation(rows * f / determinant, rows * own / determinant);
}

// b_v -= C_v t, b_v saved first where `finish` puts it back (t zero outside the groups).
fn deflate_row(v: u32, t: vec3<f32>) {
    let moved = vertex_block_times(translation_block(v), t);
    for (var c = 0u; c < 3u; c++) {
        let i = 3u * v + c;
        if (params.translation >= SPLIT_BLOCKS) {
            rhs_saved[i] = rhs[i];
        }
        rhs[i] -= moved[c];
    }
}

// A group's three translations, a vec4 each: t, t' and the stray one.
const DEFLATED: u32 = 0u;
const KEPT: u32 = 1u;
const STRAY: u32 = 2u;

// Group g's translations from its sums: t and t', or (`stray`) the stray one, E^-1 U^T C d.
fn store_translation(g: u32, sums: array<vec4<f32>, 3>, stray: bool) {
    let t = translation_from(sums);
    if (stray) {
        translation[3u * g + STRAY] = vec4<f32>(t.deflated, 0.0);
    } else {
        translation[3u * g + DEFLATED] = vec4<f32>(t.deflated, 0.0);
        translation[3u * g + KEPT] = vec4<f32>(t.kept, 0.0);
    }
}

// What a settled split solve adds to its direction d at vertex v: t', less the stray
// translation of d (which a solve that fell back to b has not had summed).
fn step_translation(v: u32, state: u32) -> vec3<f32> {
    let stray = select(translation_at(v, STRAY), vec3<f32>(0.0), state == NEGATIVE_FIRST);
    return translation_at(v, KEPT) - stray;
}

// Translation `which` at vertex v (zero outside the groups).
fn translation_at(v: u32, which: u32) -> vec3<f32> {
    let g = translation_groups[v];
    if (g == NO_GROUP) {
        return vec3<f32>(0.0);
    }
    return translation[3u * g + which].xyz;
}

fn translation_chunk_count() -> u32 {
    return translation_chunks[params.translation_groups];
}

// The members of chunk `chunk`: a range of the member list.
fn translation_chunk(chunk: u32) -> vec2<u32> {
    let at = params.translation_groups + 1u + 2u * chunk;
    return vec2<u32>(translation_chunks[at], translation_chunks[at + 1u]);
}

fn translation_member(i: u32) -> u32 {
    return translation_chunks[params.translation_groups + 1u + 2u * translation_chunk_count() + i];
}

// Chunk `chunk`'s sums of b and C over the invocations, to `translation_partials` (each
// invocation must call it, the chunk the same in all).
fn sum_chunk(lid: u32, chunk: u32, stray: bool) {
    var own = array<vec4<f32>, 3>();
    if (chunk < translation_chunk_count()) {
        let members = translation_chunk(chunk);
        for (var i = members.x + lid; i < members.y; i += INVOCATIONS) {
            let terms = translation_terms(translation_member(i), stray);
            for (var k = 0u; k < 3u; k++) {
                own[k] += terms[k];
            }
        }
    }
    for (var k = 0u; k < 3u; k++) {
        let total = workgroup_sum(lid, own[k]);
        if (lid == 0u && chunk < translation_chunk_count()) {
            translation_partials[3u * chunk + k] = total;
        }
    }
}

@compute @workgroup_size(WORKGROUP)
fn translation_sums(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    sum_chunk(lid, workgroup_slot(group, groups), false);
}

@compute @workgroup_size(WORKGROUP)
fn translation_solve(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    solve_group(lid, workgroup_slot(group, groups), false);
}

@compute @workgroup_size(WORKGROUP)
fn stray_sums(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    sum_chunk(lid, workgroup_slot(group, groups), true);
}

@compute @workgroup_size(WORKGROUP)
fn stray_solve(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    solve_group(lid, workgroup_slot(group, groups), true);
}

// Group g's chunks summed and its translations stored (each invocation must call it).
fn solve_group(lid: u32, g: u32, stray: bool) {
    var own = array<vec4<f32>, 3>();
    if (g < params.translation_groups) {
        for (var chunk = translation_chunks[g] + lid; chunk < translation_chunks[g + 1u]; chunk += INVOCATIONS) {
            for (var k = 0u; k < 3u; k++) {
                own[k] += translation_partials[3u * chunk + k];
            }
        }
    }
    var sums = array<vec4<f32>, 3>();
    for (var k = 0u; k < 3u; k++) {
        sums[k] = workgroup_sum(lid, own[k]);
    }
    if (lid == 0u && g < params.translation_groups) {
        store_translation(g, sums, stray);
    }
}

@compute @workgroup_size(WORKGROUP)
fn deflate(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v = workgroup_slot(group, groups) * WORKGROUP + lid;
    if (v < params.vertex_count) {
        deflate_row(v, translation_at(v, DEFLATED));
    }
}

@compute @workgroup_size(WORKGROUP)
fn finish(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    settle_solve(group, groups, lid, all_residual_partials(lid).x);
}

@compute @workgroup_size(WORKGROUP)
fn finish_pipelined(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    settle_solve(group, groups, lid, all_pipelined_partials(lid).x);
}

// Pipelined CG (Ghysels and Vanroose 2014, Alg. 4), the loop's form for budgeted Jacobi
// solves: in exact arithmetic the iterates of CG, with the two global sums of an iteration
// fused into one, so an iteration is one dispatch instead of `product` and `update`. Besides
// x, r and u = P r (`z`) it carries w = A u, m = P w (in `p_in`, the new one to `p_out`, the
// ping-pong CG uses for p), the direction p, s = A p (`ap`) and A q with q = P s (p, w and
// A q in `pipelined_vectors`). An iteration multiplies once, n = A m, by the m the last
// dispatch completed; u and m are formed where r and w are (P must be pointwise: Jacobi,
// not FSAI's G^T G, which spans two rings), and w, s, A q, p, x and r follow by recurrence.
// It sums (r.r, r.u) and w.u, which gives p.Ap = w.u - beta r.u / alpha_last; the partials
// ping-pong after m, as a dispatch both sums and writes them.

// After `setup`, bound with the odd parity (its outputs are the first iteration's inputs):
// the starting scalars, w = A u, m = P w, and the partials with w.u added to setup's.
@compute @workgroup_size(WORKGROUP)
fn pipeline_start(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let row = row_of(slot, lid);
    let scalars = starting_scalars_from_setup(lid, all_residual_partials(lid));
    if (lid == 0u && slot == 0u) {
        scalars_out = scalars;
    }
    multiplied = PRECONDITIONED_RESIDUAL;
    let w = row_product(lid, row);
    var wu = 0.0;
    if (row.v < params.vertex_count && row.lane == 0u) {
        let v = row.v;
        let m = jacobi_times(v, w);
        for (var c = 0u; c < 3u; c++) {
            pipelined_vectors[3u * params.vertex_count + 3u * v + c] = w[c];
            p_out[3u * v + c] = m[c];
        }
        wu = dot(w, z3(v));
    }
    let total = workgroup_sum(lid, vec4<f32>(wu, 0.0, 0.0, 0.0));
    if (lid == 0u && slot < loop_partials()) {
        store_pipelined_partial(slot, vec4<f32>(residual_partials[slot], total.x, 0.0));
    }
}

// Row v of a pipelined iteration, given its n = A m: the recurrences (the old vectors
// ignored on the first iteration), u = P r and the next m = P w; returns its share of
// (r.r, r.u, w.u).
fn pipelined_row(v: u32, n: vec3<f32>, alpha: f32, beta: f32, first: bool) -> vec3<f32> {
    let w = pipelined3(v, 1u);
    let u = z3(v);
    var aq = n;
    var s = w;
    var p = u;
    if (!first) {
        aq += beta * pipelined3(v, 2u);
        s += beta * ap3(v);
        p += beta * pipelined3(v, 0u);
    }
    let x = direction3(v) + alpha * p;
    let r_new = r3(v) - alpha * s;
    let w_new = w - alpha * aq;
    let u_new = jacobi_times(v, r_new);
    let m_new = jacobi_times(v, w_new);
    let n3 = 3u * params.vertex_count;
    for (var c = 0u; c < 3u; c++) {
        let i = 3u * v + c;
        pipelined_vectors[i] = p[c];
        pipelined_vectors[n3 + i] = w_new[c];
        pipelined_vectors[2u * n3 + i] = aq[c];
        ap[i] = s[c];
        direction[i] = x[c];
        r[i] = r_new[c];
        z[i] = u_new[c];
        p_out[i] = m_new[c];
    }
    return vec3<f32>(dot(r_new, r_new), dot(r_new, u_new), dot(w_new, u_new));
}

// One pipelined iteration: settles the last (its r.r against the tolerance), then alpha and
// beta from the sums, n = A m, and the rows' recurrences; partials (r.r, r.u) and w.u.
@compute @workgroup_size(WORKGROUP)
fn pipelined(@builtin(workgroup_id) group: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = workgroup_slot(group, groups);
    let row = row_of(slot, lid);
    let sums = all_pipelined_partials(lid);
    let wu = sums.z;
    var s = settle(scalars_in, sums.x);
    let first = s.started == 0u;
    let gamma = sums.y;
    let beta = select(gamma / s.rz, 0.0, first);
    // p.Ap, by its recurrence.
    let curvature = select(wu - beta * gamma / s.alpha, wu, first);
    var running = s.state == RUNNING;
    if (running && !(curvature > 0.0)) {
        s.iterations += 1u;
        s.state = select(NEGATIVE_LATER, NEGATIVE_FIRST, s.iterations == 1u);
        running = false;
    }
    let alpha = select(s.alpha, gamma / curvature, running);
    multiplied = PIPELINED_M;
    var n = vec3<f32>(0.0);
    if (running && row.v < params.vertex_count) {
        n = product_share(row);
    }
    n = row_total(lid, n);
    var dots = vec3<f32>(0.0);
    if (running && row.v < params.vertex_count && row.lane == 0u) {
        dots = pipelined_row(row.v, n, alpha, beta, first);
    }
    let total = workgroup_sum(lid, vec4<f32>(dots, 0.0));
    if (lid == 0u) {
        if (slot < loop_partials()) {
            // Carried over unchanged once stopped, for `finish_pipelined`.
            store_pipelined_partial(slot, select(pipelined_partial(slot), total, running));
        }
        if (slot == 0u) {
            scalars_out = Scalars(gamma, sums.x, s.threshold_squared, s.relative_tolerance, s.iterations, s.state, 1u, 0u, alpha);
        }
    }
}

// The whole solve in one workgroup (Jacobi, from zero), for bodies small enough that
// dispatches, not arithmetic, would bound the multi-workgroup loop: the same algorithm and
// stopping rules (setup, the start's checks, then product and update per iteration), the rows
// walked in SMALL_SWEEPS sweeps of INVOCATIONS / lanes, and the status written to
// `scalars_out` as `finish` writes it. Dispatch it with one workgroup.
// Between the start and the end nothing goes through device memory but the matrix: each row's
// vectors (r, p, the direction, Ap, the inverse diagonal) stay in the registers of the
// invocation that serves it as lane 0 (`SmallRow`), and p, which the neighbours' products read,
// goes through workgroup memory (`p_small`). So an iteration waits on no store to device
// memory and no storage barrier, only on the matrix's loads and the reductions' barriers.
var<workgroup> carry_on: u32;

// The sweeps that cover the one-workgroup solve's rows, at most MAX_SMALL_SWEEPS, and p there,
// three floats a row for SMALL_FLOATS / 3 rows (one elsewhere, where nothing reads it; the host
// sets both for the solve's pipeline, `SmallSolve` in src/backend/gpu/pcg.rs).
const MAX_SMALL_SWEEPS: u32 = 8u;
override SMALL_SWEEPS: u32 = 1u;
override SMALL_FLOATS: u32 = 3u;
var<workgroup> p_small: array<f32, SMALL_FLOATS>;

fn p_small3(v: u32) -> vec3<f32> {
    return vec3<f32>(p_small[3u * v], p_small[3u * v + 1u], p_small[3u * v + 2u]);
}

// A row of the one-workgroup solve, in the registers of the invocation that serves it.
struct SmallRow {
    r: vec3<f32>,
    p: vec3<f32>,
    direction: vec3<f32>,
    ap: vec3<f32>,
    inverse: vec3<f32>,
}

// The split's translations (t and t', or the stray one), every group's, in this workgroup
// alone (each invocation must call it).
fn translations_in_workgroup(lid: u32, stray: bool) {
    for (var chunk = 0u; chunk < translation_chunk_count(); chunk++) {
        sum_chunk(lid, chunk, stray);
    }
    storageBarrier();
    for (var g = lid; g < params.translation_groups; g += INVOCATIONS) {
        var sums = array<vec4<f32>, 3>();
        for (var chunk = translation_chunks[g]; chunk < translation_chunks[g + 1u]; chunk++) {
            for (var k = 0u; k < 3u; k++) {
                sums[k] += translation_partials[3u * chunk + k];
            }
        }
        store_translation(g, sums, stray);
    }
    storageBarrier();
}

@compute @workgroup_size(INVOCATIONS)
fn solve_small(@builtin(local_invocation_index) lid: u32) {
    let n = params.vertex_count;
    multiplied = P_ITSELF;
    // The split along the translations (`deflate`), all in this workgroup: every group's
    // translations, then b deflated.
    if (params.translation != 0u) {
        translations_in_workgroup(lid, false);
        for (var v = lid; v < n; v += INVOCATIONS) {
            deflate_row(v, translation_at(v, DEFLATED));
        }
        storageBarrier();
    }
    var partial = vec2<f32>(0.0);
    for (var v = lid; v < n; v += INVOCATIONS) {
        partial += setup_row(v, vec3<f32>(0.0));
    }
    let sums = workgroup_sum(lid, vec4<f32>(partial, 0.0, 0.0)).xy;
    let start = starting_scalars(lid, sums, sums.x);
    storageBarrier();
    // Each invocation takes the rows it serves as lane 0 into registers, p = z.
    var serves: array<Row, MAX_SMALL_SWEEPS>;
    var rows: array<SmallRow, MAX_SMALL_SWEEPS>;
    for (var s = 0u; s < SMALL_SWEEPS; s++) {
        let row = row_of(s, lid);
        serves[s] = row;
        if (row.v < n && row.lane == 0u) {
            let inverse = vec3<f32>(inverse_diagonal[3u * row.v], inverse_diagonal[3u * row.v + 1u], inverse_diagonal[3u * row.v + 2u]);
            let rv = r3(row.v);
            rows[s] = SmallRow(rv, inverse * rv, vec3<f32>(0.0), vec3<f32>(0.0), inverse);
            for (var c = 0u; c < 3u; c++) {
                p_small[3u * row.v + c] = rows[s].p[c];
            }
        }
    }
    var state = start.state;
    let threshold_squared = start.threshold_squared;
    var rz = start.rz;
    var rr = start.rr;
    var iterations = 0u;
    if (lid == 0u) {
        carry_on = u32(state == RUNNING && params.max_iterations > 0u);
    }
    loop {
        // (A barrier: p's stores in workgroup memory are seen from here on.)
        if (workgroupUniformLoad(&carry_on) == 0u) {
            break;
        }
        // Ap and p.Ap.
        var curvature = 0.0;
        for (var s = 0u; s < SMALL_SWEEPS; s++) {
            let row = serves[s];
            let acc = row_product(lid, row);
            if (row.v < n && row.lane == 0u) {
                rows[s].ap = acc;
                curvature += dot(rows[s].p, acc);
            }
        }
        curvature = workgroup_sum(lid, vec4<f32>(curvature, 0.0, 0.0, 0.0)).x;
        iterations += 1u;
        if (!(curvature > 0.0)) {
            state = select(NEGATIVE_LATER, NEGATIVE_FIRST, iterations == 1u);
        } else {
            // direction += alpha p, r -= alpha Ap, z = P r.
            let alpha = rz / curvature;
            var sums = vec2<f32>(0.0);
            for (var s = 0u; s < SMALL_SWEEPS; s++) {
                if (serves[s].v < n && serves[s].lane == 0u) {
                    rows[s].direction += alpha * rows[s].p;
                    rows[s].r -= alpha * rows[s].ap;
                    let rv = rows[s].r;
                    sums += vec2<f32>(dot(rv, rv), dot(rv, rows[s].inverse * rv));
                }
            }
            let total = workgroup_sum(lid, vec4<f32>(sums, 0.0, 0.0));
            rr = total.x;
            if (rr <= threshold_squared) {
                state = CONVERGED;
            } else if (iterations >= params.max_iterations) {
                state = LIMIT;
            } else {
                // p = z + beta p.
                let beta = total.y / rz;
                rz = total.y;
                for (var s = 0u; s < SMALL_SWEEPS; s++) {
                    let v = serves[s].v;
                    if (v < n && serves[s].lane == 0u) {
                        rows[s].p = rows[s].inverse * rows[s].r + beta * rows[s].p;
                        for (var c = 0u; c < 3u; c++) {
                            p_small[3u * v + c] = rows[s].p[c];
                        }
                    }
                }
            }
        }
        if (lid == 0u) {
            carry_on = u32(state == RUNNING);
        }
    }
    // The rows' vectors back to device memory, as the loop leaves them.
    for (var s = 0u; s < SMALL_SWEEPS; s++) {
        let v = serves[s].v;
        if (v < n && serves[s].lane == 0u) {
            let row = rows[s];
            let zv = row.inverse * row.r;
            for (var c = 0u; c < 3u; c++) {
                let i = 3u * v + c;
                direction[i] = row.direction[c];
                r[i] = row.r[c];
                z[i] = zv[c];
                p_out[i] = row.p[c];
                ap[i] = row.ap[c];
            }
        }
    }
    storageBarrier();
    if (params.translation != 0u && state != NEGATIVE_FIRST) {
        translations_in_workgroup(lid, true);
    }
    if (state == NEGATIVE_FIRST || params.translation != 0u) {
        for (var v = lid; v < n; v += INVOCATIONS) {
            let moved = step_translation(v, state);
            for (var c = 0u; c < 3u; c++) {
                let i = 3u * v + c;
                if (state == NEGATIVE_FIRST) {
                    direction[i] = rhs[i];
                }
                if (params.translation != 0u) {
                    direction[i] += moved[c];
                }
                if (params.translation >= SPLIT_BLOCKS) {
                    rhs[i] = rhs_saved[i];
                }
            }
        }
    }
    if (lid == 0u) {
        scalars_out = Scalars(rz, rr, threshold_squared, start.relative_tolerance, iterations, state, 1u, 0u, 0.0);
    }
}
