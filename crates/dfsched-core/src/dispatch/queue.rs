//! Squillante & Lazowska's ready-queue policies (being written).
