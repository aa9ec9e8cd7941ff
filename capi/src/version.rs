//! The library's version and the text of its status codes
//! (`somalloc_status_string`).
