//! sliders kernel (being written).
