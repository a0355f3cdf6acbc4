//! Mesh readers: tetrahedral meshes from Gmsh (.msh 2.2 and 4.1 ASCII), TetGen (.node with
//! its .ele), legacy VTK (.vtk, ASCII unstructured grid) and Medit (.mesh); triangle surfaces
//! from Wavefront (.obj) and ASCII PLY (.ply). Errors name the file and the line.

use std::path::Path;

use super::{PolygonArrays, TetArrays, TriangleArrays};
use crate::error::{Error, Result};

/// Whitespace-separated tokens with their line numbers, comments (`#`) removed.
struct Tokens<'a> {
    file: String,
    items: Vec<(usize, &'a str)>,
    at: usize,
}

impl<'a> Tokens<'a> {
    fn new(file: &Path, text: &'a str) -> Tokens<'a> {
        let items = text
            .lines()
            .enumerate()
            .flat_map(|(n, line)| {
                line.split('#').next().unwrap_or("").split_whitespace().map(move |t| (n + 1, t))
            })
            .collect();
        Tokens { file: file.display().to_string(), items, at: 0 }
    }

    fn error(&self, what: &str) -> Error {
        let line = self.items.get(self.at.saturating_sub(1)).map_or(0, |(n, _)| *n);
        Error::Mesh(format!("{} line {line}: {what}", self.file))
    }

    fn next(&mut self) -> Result<&'a str> {
        let token = self.items.get(self.at).map(|(_, t)| *t);
        self.at += 1;
        token.ok_or_else(|| self.error("unexpected end of file"))
    }

    fn parse<T: std::str::FromStr>(&mut self, what: &str) -> Result<T> {
        let token = self.next()?;
        token.parse().map_err(|_| self.error(&format!("expected {what}, found {token:?}")))
    }

    fn point(&mut self) -> Result<[f64; 3]> {
        Ok([self.parse("a coordinate")?, self.parse("a coordinate")?, self.parse("a coordinate")?])
    }

    fn skip_to(&mut self, token: &str) -> Result<()> {
        while self.next()? != token {}
        Ok(())
    }

    fn find(&mut self, token: &str) -> bool {
        while let Some((_, t)) = self.items.get(self.at) {
            self.at += 1;
            if *t == token {
                return true;
            }
        }
        false
    }
}

/// Room for `count` items as a file's header announces them, but never more than the file
/// could hold (each item takes at least a byte): a corrupt count is an error when the items
/// run out, not an abort on allocation.
fn capacity(count: usize, text: &str) -> usize {
    count.min(text.len())
}

pub(crate) fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.display().to_string(), source })
}

/// Maps file vertex labels to indices and checks each tet refers to known vertices.
fn resolve(file: &Path, labels: &[i64], tets: Vec<[i64; 4]>) -> Result<Vec<[u32; 4]>> {
    let mut index = std::collections::HashMap::with_capacity(labels.len());
    for (i, &label) in labels.iter().enumerate() {
        index.insert(label, i as u32);
    }
    tets.into_iter()
        .enumerate()
        .map(|(e, tet)| {
            let mut out = [0u32; 4];
            for (k, label) in tet.iter().enumerate() {
                out[k] = *index.get(label).ok_or_else(|| {
                    Error::Mesh(format!(
                        "{}: element {e} refers to vertex {label}, which the file does not define",
                        file.display()
                    ))
                })?;
            }
            Ok(out)
        })
        .collect()
}

/// Reads tets from any supported file: `(positions, tets)` as stored.
pub(crate) fn read_tets(path: &Path) -> Result<TetArrays> {
    match extension(path).as_str() {
        "node" | "ele" => {
            let (node, ele) = (path.with_extension("node"), path.with_extension("ele"));
            tetgen(&node, &read(&node)?, &ele, &read(&ele)?)
        }
        "msh" | "vtk" | "mesh" => parse_tets(path, &read(path)?),
        _ => Err(unknown_tet_extension(path)),
    }
}

/// Parses a single-file tet mesh, the format chosen by `path`'s extension (TetGen's two files
/// go to [`tetgen`]).
pub(crate) fn parse_tets(path: &Path, text: &str) -> Result<TetArrays> {
    match extension(path).as_str() {
        "msh" => gmsh(path, text),
        "vtk" => vtk(path, text),
        "mesh" => medit(path, text),
        _ => Err(unknown_tet_extension(path)),
    }
}

fn unknown_extension(path: &Path, kind: &str, known: &str) -> Error {
    Error::Mesh(format!("{}: unknown {kind} extension {:?}; use {known}", path.display(), extension(path)))
}

fn unknown_tet_extension(path: &Path) -> Error {
    unknown_extension(path, "tet-mesh", ".msh, .node/.ele, .vtk or .mesh")
}

fn extension(path: &Path) -> String {
    path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase()
}

fn gmsh(path: &Path, text: &str) -> Result<TetArrays> {
    let mut t = Tokens::new(path, text);
    t.skip_to("$MeshFormat")?;
    let version: f64 = t.parse("the format version")?;
    let (mut labels, mut positions, mut tets) = (Vec::new(), Vec::new(), Vec::new());
    if !t.find("$Nodes") {
        return Err(t.error("no $Nodes section"));
    }
    if version >= 4.0 {
        let blocks: usize = t.parse("the number of node blocks")?;
        let _total: usize = t.parse("the number of nodes")?;
        let _min: i64 = t.parse("a node tag")?;
        let _max: i64 = t.parse("a node tag")?;
        for _ in 0..blocks {
            let (_dim, _tag, parametric): (i64, i64, i64) =
                (t.parse("an entity dimension")?, t.parse("an entity tag")?, t.parse("a flag")?);
            let count: usize = t.parse("a node count")?;
            if parametric != 0 {
                return Err(t.error("parametric nodes are not supported"));
            }
            let first = labels.len();
            for _ in 0..count {
                labels.push(t.parse("a node tag")?);
            }
            for _ in first..labels.len() {
                positions.push(t.point()?);
            }
        }
        t.skip_to("$Elements")?;
        let blocks: usize = t.parse("the number of element blocks")?;
        let _total: usize = t.parse("the number of elements")?;
        let (_min, _max): (i64, i64) = (t.parse("an element tag")?, t.parse("an element tag")?);
        for _ in 0..blocks {
            let (_dim, _tag): (i64, i64) = (t.parse("an entity dimension")?, t.parse("an entity tag")?);
            let kind: u32 = t.parse("an element type")?;
            let count: usize = t.parse("an element count")?;
            let nodes = gmsh_nodes(kind).ok_or_else(|| t.error(&format!("unknown element type {kind}")))?;
            for _ in 0..count {
                let _tag: i64 = t.parse("an element tag")?;
                let ids: Vec<i64> = (0..nodes).map(|_| t.parse("a node tag")).collect::<Result<_>>()?;
                if kind == 4 {
                    tets.push([ids[0], ids[1], ids[2], ids[3]]);
                }
            }
        }
    } else {
        let count: usize = t.parse("the number of nodes")?;
        for _ in 0..count {
            labels.push(t.parse("a node tag")?);
            positions.push(t.point()?);
        }
        t.skip_to("$Elements")?;
        let count: usize = t.parse("the number of elements")?;
        for _ in 0..count {
            let _tag: i64 = t.parse("an element tag")?;
            let kind: u32 = t.parse("an element type")?;
            let tags: usize = t.parse("a tag count")?;
            for _ in 0..tags {
                t.next()?;
            }
            let nodes = gmsh_nodes(kind).ok_or_else(|| t.error(&format!("unknown element type {kind}")))?;
            let ids: Vec<i64> = (0..nodes).map(|_| t.parse("a node tag")).collect::<Result<_>>()?;
            if kind == 4 {
                tets.push([ids[0], ids[1], ids[2], ids[3]]);
            }
        }
    }
    let tets = resolve(path, &labels, tets)?;
    Ok((positions, tets))
}

/// Nodes per Gmsh element type (the common first-order ones).
fn gmsh_nodes(kind: u32) -> Option<usize> {
    match kind {
        15 => Some(1),
        1 => Some(2),
        2 => Some(3),
        3 | 4 => Some(4),
        5 => Some(8),
        6 => Some(6),
        7 => Some(5),
        _ => None,
    }
}

/// Parses TetGen's `.node` and `.ele` texts.
pub(crate) fn tetgen(node: &Path, node_text: &str, ele: &Path, ele_text: &str) -> Result<TetArrays> {
    let (text, mut t) = (node_text, Tokens::new(node, node_text));
    let count: usize = t.parse("the number of vertices")?;
    let dimension: usize = t.parse("the dimension")?;
    let attributes: usize = t.parse("the number of attributes")?;
    let markers: usize = t.parse("the boundary-marker flag")?;
    if dimension != 3 {
        return Err(t.error("only 3-D .node files are supported"));
    }
    let (mut labels, mut positions) =
        (Vec::with_capacity(capacity(count, text)), Vec::with_capacity(capacity(count, text)));
    for _ in 0..count {
        labels.push(t.parse("a vertex index")?);
        positions.push(t.point()?);
        for _ in 0..attributes + markers {
            t.next()?;
        }
    }
    let (text, mut t) = (ele_text, Tokens::new(ele, ele_text));
    let count: usize = t.parse("the number of tets")?;
    let corners: usize = t.parse("the nodes per tet")?;
    let attributes: usize = t.parse("the number of attributes")?;
    if corners != 4 {
        return Err(t.error("only linear (4-node) tets are supported"));
    }
    let mut tets = Vec::with_capacity(capacity(count, text));
    for _ in 0..count {
        let _index: i64 = t.parse("a tet index")?;
        tets.push([
            t.parse("a vertex index")?,
            t.parse("a vertex index")?,
            t.parse("a vertex index")?,
            t.parse("a vertex index")?,
        ]);
        for _ in 0..attributes {
            t.next()?;
        }
    }
    let tets = resolve(ele, &labels, tets)?;
    Ok((positions, tets))
}

fn vtk(path: &Path, text: &str) -> Result<TetArrays> {
    let mut t = Tokens::new(path, text);
    if !t.find("POINTS") {
        return Err(t.error("no POINTS section (only ASCII unstructured grids are supported)"));
    }
    let count: usize = t.parse("the number of points")?;
    t.next()?;
    let positions: Vec<[f64; 3]> = (0..count).map(|_| t.point()).collect::<Result<_>>()?;
    if !t.find("CELLS") {
        return Err(t.error("no CELLS section"));
    }
    let cells: usize = t.parse("the number of cells")?;
    let _size: usize = t.parse("the cell list size")?;
    let mut lists = Vec::with_capacity(capacity(cells, text));
    for _ in 0..cells {
        let n: usize = t.parse("a cell size")?;
        lists.push((0..n).map(|_| t.parse("a point index")).collect::<Result<Vec<i64>>>()?);
    }
    if !t.find("CELL_TYPES") {
        return Err(t.error("no CELL_TYPES section"));
    }
    let _count: usize = t.parse("the number of cell types")?;
    let mut tets = Vec::new();
    for list in lists {
        let kind: u32 = t.parse("a cell type")?;
        if kind == 10 && list.len() == 4 {
            tets.push([list[0], list[1], list[2], list[3]]);
        }
    }
    let labels: Vec<i64> = (0..positions.len() as i64).collect();
    let tets = resolve(path, &labels, tets)?;
    Ok((positions, tets))
}

fn medit(path: &Path, text: &str) -> Result<TetArrays> {
    let mut t = Tokens::new(path, text);
    if !t.find("Vertices") {
        return Err(t.error("no Vertices section"));
    }
    let count: usize = t.parse("the number of vertices")?;
    let mut positions = Vec::with_capacity(capacity(count, text));
    for _ in 0..count {
        positions.push(t.point()?);
        t.next()?;
    }
    if !t.find("Tetrahedra") {
        return Err(t.error("no Tetrahedra section"));
    }
    let count: usize = t.parse("the number of tets")?;
    let mut tets = Vec::with_capacity(capacity(count, text));
    for _ in 0..count {
        tets.push([
            t.parse("a vertex index")?,
            t.parse("a vertex index")?,
            t.parse("a vertex index")?,
            t.parse("a vertex index")?,
        ]);
        t.next()?;
    }
    let labels: Vec<i64> = (1..=positions.len() as i64).collect();
    let tets = resolve(path, &labels, tets)?;
    Ok((positions, tets))
}

/// Reads a triangle surface: `(positions, triangles)`; polygons are split into fans.
pub(crate) fn read_triangles(path: &Path) -> Result<TriangleArrays> {
    match extension(path).as_str() {
        "obj" | "ply" => parse_triangles(path, &read(path)?),
        _ => Err(unknown_surface_extension(path)),
    }
}

fn unknown_surface_extension(path: &Path) -> Error {
    unknown_extension(path, "surface", ".obj or .ply")
}

/// Parses a triangle surface, the format chosen by `path`'s extension.
pub(crate) fn parse_triangles(path: &Path, text: &str) -> Result<TriangleArrays> {
    let (positions, polygons) = match extension(path).as_str() {
        "obj" => obj(path, text)?,
        "ply" => ply(path, text)?,
        _ => return Err(unknown_surface_extension(path)),
    };
    let mut triangles = Vec::new();
    for (p, polygon) in polygons.iter().enumerate() {
        if polygon.len() < 3 || polygon.iter().any(|&v| v as usize >= positions.len()) {
            return Err(Error::Mesh(format!(
                "{}: face {p} has fewer than 3 vertices or an index out of range",
                path.display()
            )));
        }
        for k in 1..polygon.len() - 1 {
            triangles.push([polygon[0], polygon[k], polygon[k + 1]]);
        }
    }
    Ok((positions, triangles))
}

fn obj(path: &Path, text: &str) -> Result<PolygonArrays> {
    let (mut positions, mut faces) = (Vec::new(), Vec::new());
    for (n, line) in text.lines().enumerate() {
        let mut parts = line.split_whitespace();
        let error = |what: &str| Error::Mesh(format!("{} line {}: {what}", path.display(), n + 1));
        match parts.next() {
            Some("v") => {
                let c: Vec<f64> = parts
                    .take(3)
                    .map(|s| s.parse().map_err(|_| error("bad vertex coordinate")))
                    .collect::<Result<_>>()?;
                if c.len() != 3 {
                    return Err(error("a vertex needs three coordinates"));
                }
                positions.push([c[0], c[1], c[2]]);
            }
            Some("f") => {
                let face = parts
                    .map(|s| {
                        let index: i64 =
                            s.split('/').next().unwrap_or("").parse().map_err(|_| error("bad face index"))?;
                        // 1-based, or negative: relative to the vertices read so far.
                        let resolved = if index < 0 { positions.len() as i64 + index } else { index - 1 };
                        u32::try_from(resolved).map_err(|_| error("face index out of range"))
                    })
                    .collect::<Result<Vec<u32>>>()?;
                faces.push(face);
            }
            _ => {}
        }
    }
    Ok((positions, faces))
}

fn ply(path: &Path, text: &str) -> Result<PolygonArrays> {
    let mut lines = text.lines().enumerate();
    let (mut vertices, mut faces, mut vertex_properties) = (0usize, 0usize, 0usize);
    let mut in_vertex = false;
    for (n, line) in lines.by_ref() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["format", format, ..] if *format != "ascii" => {
                return Err(Error::Mesh(format!(
                    "{} line {}: only ASCII PLY is supported",
                    path.display(),
                    n + 1
                )));
            }
            ["element", "vertex", count] => {
                vertices = header_count(path, n, count)?;
                in_vertex = true;
            }
            ["element", "face", count] => {
                faces = header_count(path, n, count)?;
                in_vertex = false;
            }
            ["element", ..] => in_vertex = false,
            ["property", ..] if in_vertex => vertex_properties += 1,
            ["end_header"] => break,
            _ => {}
        }
    }
    let mut words = lines.flat_map(|(n, line)| line.split_whitespace().map(move |w| (n + 1, w)));
    // The next word with its line, or an error naming the file and what was expected.
    let mut take = |what: &str| -> Result<(usize, &str)> {
        words.next().ok_or_else(|| {
            Error::Mesh(format!("{}: unexpected end of file, expected {what}", path.display()))
        })
    };
    let parse = |(n, word): (usize, &str), what: &str| -> Result<f64> {
        word.parse()
            .map_err(|_| Error::Mesh(format!("{} line {n}: expected {what}, found {word:?}", path.display())))
    };
    // Sizes and vertex indices are non-negative integers.
    let index = |(n, word): (usize, &str), what: &str| -> Result<u32> {
        word.parse().map_err(|_| {
            Error::Mesh(format!(
                "{} line {n}: expected {what} (a non-negative integer), found {word:?}",
                path.display()
            ))
        })
    };
    let mut positions = Vec::with_capacity(capacity(vertices, text));
    for _ in 0..vertices {
        let values: Vec<f64> = (0..vertex_properties.max(3))
            .map(|_| parse(take("a vertex property")?, "a vertex property"))
            .collect::<Result<_>>()?;
        positions.push([values[0], values[1], values[2]]);
    }
    let mut polygons = Vec::with_capacity(capacity(faces, text));
    for _ in 0..faces {
        let k = index(take("a face size")?, "a face size")?;
        polygons
            .push((0..k).map(|_| index(take("a vertex index")?, "a vertex index")).collect::<Result<_>>()?);
    }
    Ok((positions, polygons))
}

/// An element count of a PLY header.
fn header_count(path: &Path, line: usize, word: &str) -> Result<usize> {
    word.parse().map_err(|_| {
        Error::Mesh(format!(
            "{} line {}: expected an element count, found {word:?}",
            path.display(),
            line + 1
        ))
    })
}
