//! Events transposed into column vectors, and the vectors into a
//! DataFrame (dictionary-encoded strings, nulls for other algorithms' columns).
use std::{collections::HashMap, hash::BuildHasherDefault, sync::Arc};

use anyhow::Result;
use ccctl_core::abi::ccctl_event;
use ccctl_core::registry::{self, EventGroup};
use ccctl_core::trace::event;
use polars::prelude::*;
use polars_arrow::bitmap::{Bitmap, MutableBitmap};

use super::COLUMNS;

/// The address columns' Categories, held for the life of the process.
/// polars keeps Categories by name and namespace in a registry of weak
/// references, and a Categories that is dropped removes its name from the
/// registry, whichever object the name points to by then. So when one
/// thread drops the last reference while another creates the same name,
/// the drop can remove the newer object's entry, the next lookup makes a
/// third object, and combining row groups fails with "Categories which
/// should be equal have different backing objects" (a unit test reading a
/// trace back while other tests wrote theirs, CI clone of 2026-11-29).
/// Held here, the count never falls to 0 and every writer and reader in
/// the process shares one object.
static ADDR_CATEGORIES: std::sync::LazyLock<Arc<Categories>> = std::sync::LazyLock::new(|| {
    Categories::new(
        "addr".into(),
        "ccctl.trace".into(),
        CategoricalPhysical::U32,
    )
});

/// Addresses as a Categorical column: each address is formatted and
/// given a category id once, and the Parquet writer stores the ids against
/// a dictionary instead of hashing every string of every row group.
struct AddrCache {
    ids: HashMap<u128, u32, BuildHasherDefault<U64Hasher>>,
    dtype: DataType,
}

impl AddrCache {
    pub(super) fn new() -> AddrCache {
        let cats = ADDR_CATEGORIES.clone();
        AddrCache {
            ids: HashMap::default(),
            dtype: DataType::from_categories(cats),
        }
    }

    #[inline]
    fn id(&mut self, addr: [u8; 16]) -> Result<u32> {
        let key = u128::from_ne_bytes(addr);
        if let Some(&id) = self.ids.get(&key) {
            return Ok(id);
        }
        let id = self
            .dtype
            .cat_mapping()?
            .insert_cat(&event::addr_string(addr))?;
        self.ids.insert(key, id);
        Ok(id)
    }

    fn column(&self, name: &str, ids: Vec<u32>) -> Column {
        let phys = UInt32Chunked::from_vec(name.into(), ids);
        // SAFETY: every id came from this dtype's mapping (`id`).
        unsafe { Categorical32Chunked::from_cats_and_dtype_unchecked(phys, self.dtype.clone()) }
            .into_series()
            .into()
    }
}

/// A hasher for one u64 or u128 key (SipHash costs more than the rest of a lookup).
#[derive(Default)]
struct U64Hasher(u64);

impl std::hash::Hasher for U64Hasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }
}

/// A small enumeration (`CCCTL_*` code -> name) as a polars Enum: the
/// names are the categories, each code maps to one of them.
struct EnumColumn {
    dtype: DataType,
    code: [u8; 256],
}

impl EnumColumn {
    pub(super) fn new(name_of: fn(u8) -> &'static str) -> Result<EnumColumn> {
        let mut names: Vec<&str> = Vec::new();
        let mut code = [0u8; 256];
        for c in 0..=255u8 {
            let name = name_of(c);
            code[c as usize] = match names.iter().position(|n| *n == name) {
                Some(i) => i as u8,
                None => {
                    names.push(name);
                    (names.len() - 1) as u8
                }
            };
        }
        Ok(EnumColumn {
            dtype: DataType::from_frozen_categories(FrozenCategories::new(names)?),
            code,
        })
    }

    #[inline]
    fn code(&self, raw: u8) -> u8 {
        self.code[raw as usize]
    }

    /// The column from its codes as a chunk (nulls where it has them).
    fn column_of(&self, phys: UInt8Chunked) -> Column {
        // SAFETY: the codes index the categories this dtype was built from.
        unsafe { Categorical8Chunked::from_cats_and_dtype_unchecked(phys, self.dtype.clone()) }
            .into_series()
            .into()
    }
}

/// How each kind of column is held while a row group fills, and what it
/// needs from the session (`ColumnKinds`).
macro_rules! store_ty {
    (U64) => {
        u64
    };
    (U32) => {
        u32
    };
    (F64) => {
        f64
    };
    (Bool) => {
        bool
    };
    (Addr) => {
        u32
    };
    (Enum) => {
        u8
    };
}

/// The per-column state a kind needs: an enumeration's dtype and codes.
macro_rules! state_ty {
    (Enum) => {
        EnumColumn
    };
    ($other:ident) => {
        ()
    };
}

macro_rules! state_new {
    (Enum($f:path)) => {
        EnumColumn::new($f)?
    };
    ($other:ident) => {
        ()
    };
}

/// One column of the frame from its vector and its rows' validity.
macro_rules! column {
    ($kinds:ident, $name:ident, Addr, $v:expr, $valid:expr) => {
        $kinds.addrs.column(stringify!($name), $v)
    };
    ($kinds:ident, $name:ident, Enum, $v:expr, $valid:expr) => {
        $kinds.$name.column_of(UInt8Chunked::from_vec_validity(
            stringify!($name).into(),
            $v,
            bitmap!($valid),
        ))
    };
    ($kinds:ident, $name:ident, Bool, $v:expr, $valid:expr) => {{
        let v: Vec<bool> = $v;
        let values =
            polars_arrow::array::BooleanArray::from_slice(&v).with_validity(bitmap!($valid));
        BooleanChunked::with_chunk(stringify!($name).into(), values)
            .into_series()
            .into()
    }};
    ($kinds:ident, $name:ident, U64, $v:expr, $valid:expr) => {
        UInt64Chunked::from_vec_validity(stringify!($name).into(), $v, bitmap!($valid))
            .into_series()
            .into()
    };
    ($kinds:ident, $name:ident, U32, $v:expr, $valid:expr) => {
        UInt32Chunked::from_vec_validity(stringify!($name).into(), $v, bitmap!($valid))
            .into_series()
            .into()
    };
    ($kinds:ident, $name:ident, F64, $v:expr, $valid:expr) => {
        Float64Chunked::from_vec_validity(stringify!($name).into(), $v, bitmap!($valid))
            .into_series()
            .into()
    };
}

/// The validity bitmap of a group's columns (`None`: every row valid).
macro_rules! validity {
    ($masks:ident, All) => {
        None
    };
    ($masks:ident, $g:ident) => {
        Some(&$masks[EventGroup::$g as usize])
    };
}

/// A group's mask as a column's validity bitmap (`None`: every row valid).
macro_rules! bitmap {
    ($mask:expr) => {{
        let mask: Option<&Bitmap> = $mask;
        mask.cloned()
    }};
}

/// The groups' masks, indexed by `EventGroup as usize`.
const GROUPS: [EventGroup; 4] = [
    EventGroup::Bbr,
    EventGroup::Modest,
    EventGroup::Patched,
    EventGroup::Dstar,
];

/// A block's addresses as category ids, before any column grows (a lookup
/// can fail, and a failure must leave every column the same length).
macro_rules! block_ids {
    ($kinds:ident, $block:expr, Addr, |$e:ident| $val:expr) => {
        Some(
            $block
                .iter()
                .map(|$e| $kinds.addrs.id($val))
                .collect::<Result<Vec<u32>>>()?,
        )
    };
    ($kinds:ident, $block:expr, $other:ident, |$e:ident| $val:expr) => {
        None::<Vec<u32>>
    };
}

/// One column grown by a block's values.
macro_rules! extend_column {
    ($col:expr, $kinds:ident, $block:expr, $ids:expr, $name:ident, Addr, |$e:ident| $val:expr) => {
        if let Some(ids) = &$ids {
            $col.extend_from_slice(ids)
        }
    };
    ($col:expr, $kinds:ident, $block:expr, $ids:expr, $name:ident, Enum, |$e:ident| $val:expr) => {
        $col.extend($block.iter().map(|$e| $kinds.$name.code($val)))
    };
    ($col:expr, $kinds:ident, $block:expr, $ids:expr, $name:ident, $other:ident, |$e:ident| $val:expr) => {
        $col.extend($block.iter().map(|$e| $val))
    };
}

/// Events staged before they are transposed into the columns, a block at a
/// time: one column after the other over a block that stays in the cache,
/// instead of every event's values scattered over 55 growing vectors (the
/// consumer's push took ~100 ns per event that way; `perf record`,
/// 2026-11-28). 64 events are 16 KiB, so the block stays in the L1 data
/// cache through the 55 passes over it; 256 (64 KiB) spilled to L2, and the
/// transpose took 21 % of the samples on one core against 12 % with 64
/// (32 and 128 measured the same as 64; docs/performance.md, 2026-11-29).
const BLOCK: usize = 64;

macro_rules! define_columns {
    ($( $name:ident : $kind:ident $(($f:path))?, $group:ident, |$e:ident| $val:expr, $ty:literal, $doc:literal; )*) => {
        /// The dtypes of the string-valued columns, and the address ids so far.
        #[allow(dead_code)]
        pub(super) struct ColumnKinds {
            addrs: AddrCache,
            /// Per algorithm id: which groups of columns its events fill.
            fills: [[bool; GROUPS.len()]; 256],
            $( $name: state_ty!($kind), )*
        }

        impl ColumnKinds {
            pub(super) fn new() -> Result<ColumnKinds> {
                Ok(ColumnKinds {
                    addrs: AddrCache::new(),
                    fills: std::array::from_fn(|id| GROUPS.map(|g| registry::fills(id as u8, g))),
                    $( $name: state_new!($kind $(($f))?), )*
                })
            }
        }

        /// One row group being filled: the schema's columns as vectors, the
        /// events of the last block staged until it is full.
        pub(super) struct Columns {
            staged: Vec<ccctl_event>,
            $( $name: Vec<store_ty!($kind)>, )*
            /// Per row: does its algorithm fill each group's columns?
            /// (null where not), built as the validity bitmaps themselves.
            fills: [MutableBitmap; GROUPS.len()],
        }

        impl Columns {
            pub(super) fn with_capacity(n: usize) -> Columns {
                Columns {
                    staged: Vec::with_capacity(BLOCK.min(n)),
                    $( $name: Vec::with_capacity(n), )*
                    fills: std::array::from_fn(|_| MutableBitmap::with_capacity(n)),
                }
            }

            /// Events pushed, staged ones included.
            pub(super) fn len(&self) -> usize {
                self.fills[0].len() + self.staged.len()
            }

            #[inline]
            pub(super) fn push(&mut self, e: &ccctl_event, kinds: &mut ColumnKinds) -> Result<()> {
                self.staged.push(*e);
                if self.staged.len() >= BLOCK {
                    self.transpose(kinds)?;
                }
                Ok(())
            }

            /// The staged events into the columns. On an error (an address
            /// that cannot be given an id) no column has grown and the
            /// events stay staged.
            fn transpose(&mut self, kinds: &mut ColumnKinds) -> Result<()> {
                let block = &self.staged;
                // Only the address columns have ids; the others' are None.
                $( #[allow(unused_variables)] let $name = block_ids!(kinds, block, $kind, |$e| $val); )*
                $( extend_column!(self.$name, kinds, block, $name, $name, $kind, |$e| $val); )*
                for e in block {
                    for (&fill, fills) in kinds.fills[e.algo as usize].iter().zip(self.fills.iter_mut()) {
                        fills.push(fill);
                    }
                }
                self.staged.clear();
                Ok(())
            }

            /// The row group as a frame (the vectors move into polars, no copy).
            pub(super) fn into_frame(mut self, kinds: &mut ColumnKinds) -> Result<DataFrame> {
                self.transpose(kinds)?;
                let n = self.len();
                // One validity bitmap per group of columns, shared by its columns.
                let masks: Vec<Bitmap> = self.fills.into_iter().map(Bitmap::from).collect();
                let columns: Vec<Column> = vec![
                    $( column!(kinds, $name, $kind, self.$name, validity!(masks, $group)), )*
                ];
                debug_assert!(columns.iter().map(|c| c.name().as_str()).eq(COLUMNS.iter().copied()));
                Ok(DataFrame::new(n, columns)?)
            }
        }
    };
}
ccctl_core::with_event_columns!(define_columns);

#[cfg(test)]
mod tests {
    use super::*;

    /// No session holds the last reference to the address Categories, so
    /// polars' registry never sees it dropped (see [`ADDR_CATEGORIES`]):
    /// with a Categories per session the count here would be 1.
    #[test]
    fn address_categories_outlive_every_session() {
        let cats = match &AddrCache::new().dtype {
            DataType::Categorical(cats, _) => cats.clone(),
            other => panic!("addresses are {other:?}"),
        };
        assert!(
            Arc::strong_count(&cats) >= 2,
            "the session was the last holder besides this test"
        );
        assert!(Arc::ptr_eq(
            &cats,
            &Categories::new(
                "addr".into(),
                "ccctl.trace".into(),
                CategoricalPhysical::U32
            )
        ));
    }
}
