//! kayles kernel (being written).
