//! Path validation (`myriad_proto::validate_path`, `validate_name`) on arbitrary UTF-8:
//! no panic, and the rules agree with each other and with placement's path helpers:
//! a valid path's parent is a valid path and its last component a valid name; a valid name
//! under "/" is a valid path.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myriad_placement::split_parent;
use myriad_proto::{validate_name, validate_path};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let path_ok = validate_path(&text).is_ok();
    let name_ok = validate_name(&text).is_ok();

    if path_ok && text != "/" {
        let (parent, name) = split_parent(&text);
        assert!(
            validate_path(parent).is_ok(),
            "parent {parent:?} of valid {text:?} is invalid"
        );
        assert!(
            validate_name(name).is_ok(),
            "last name {name:?} of valid {text:?} is invalid"
        );
        assert!(!parent.is_empty() && parent.len() < text.len());
    }
    if name_ok {
        let top = format!("/{text}");
        assert!(
            validate_path(&top).is_ok(),
            "valid name {text:?} is no valid path under /"
        );
        assert!(!text.contains('/') && !text.contains('\0'));
    }
});
