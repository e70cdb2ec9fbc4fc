//! hex kernel (being written).
