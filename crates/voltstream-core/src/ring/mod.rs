//! TODO(skeleton): see DESIGN.md
