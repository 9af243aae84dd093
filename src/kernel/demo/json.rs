//! The demo's `json!`: serde_json's macro (its munching rules, MIT OR Apache-2.0) with each
//! object built out of line. serde_json's expands every key into an inlined `String`, insert
//! and drop; over the demo's ~600 keys that was about 200 KB of the binary (docs/performance.md,
//! "Binary size"). The values are the same: keys in order, leaves through `serde_json::to_value`.

use serde::Serialize;
use serde_json::{Map, Value};

#[inline(never)]
pub(super) fn object() -> Map<String, Value> {
    Map::new()
}

#[inline(never)]
pub(super) fn put(object: &mut Map<String, Value>, key: &str, value: Value) {
    object.insert(key.to_owned(), value);
}

/// A leaf as serde_json's `json!` converts it (which unwraps: every leaf the demo writes
/// converts, and `Null` stands in for what cannot).
#[inline(never)]
pub(super) fn leaf<T: Serialize + ?Sized>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or_default()
}

macro_rules! json {
    (@array [$($elems:expr,)*]) => {
        vec![$($elems,)*]
    };
    (@array [$($elems:expr),*]) => {
        vec![$($elems),*]
    };
    (@array [$($elems:expr,)*] null $($rest:tt)*) => {
        json!(@array [$($elems,)* json!(null)] $($rest)*)
    };
    (@array [$($elems:expr,)*] true $($rest:tt)*) => {
        json!(@array [$($elems,)* json!(true)] $($rest)*)
    };
    (@array [$($elems:expr,)*] false $($rest:tt)*) => {
        json!(@array [$($elems,)* json!(false)] $($rest)*)
    };
    (@array [$($elems:expr,)*] [$($array:tt)*] $($rest:tt)*) => {
        json!(@array [$($elems,)* json!([$($array)*])] $($rest)*)
    };
    (@array [$($elems:expr,)*] {$($map:tt)*} $($rest:tt)*) => {
        json!(@array [$($elems,)* json!({$($map)*})] $($rest)*)
    };
    (@array [$($elems:expr,)*] $next:expr, $($rest:tt)*) => {
        json!(@array [$($elems,)* json!($next),] $($rest)*)
    };
    (@array [$($elems:expr,)*] $last:expr) => {
        json!(@array [$($elems,)* json!($last)])
    };
    (@array [$($elems:expr),*] , $($rest:tt)*) => {
        json!(@array [$($elems,)*] $($rest)*)
    };

    (@object $object:ident () () ()) => {};
    (@object $object:ident [$($key:tt)+] ($value:expr) , $($rest:tt)*) => {
        $crate::kernel::demo::json::put(&mut $object, $($key)+, $value);
        json!(@object $object () ($($rest)*) ($($rest)*));
    };
    (@object $object:ident [$($key:tt)+] ($value:expr)) => {
        $crate::kernel::demo::json::put(&mut $object, $($key)+, $value);
    };
    (@object $object:ident ($($key:tt)+) (: null $($rest:tt)*) $copy:tt) => {
        json!(@object $object [$($key)+] (json!(null)) $($rest)*);
    };
    (@object $object:ident ($($key:tt)+) (: true $($rest:tt)*) $copy:tt) => {
        json!(@object $object [$($key)+] (json!(true)) $($rest)*);
    };
    (@object $object:ident ($($key:tt)+) (: false $($rest:tt)*) $copy:tt) => {
        json!(@object $object [$($key)+] (json!(false)) $($rest)*);
    };
    (@object $object:ident ($($key:tt)+) (: [$($array:tt)*] $($rest:tt)*) $copy:tt) => {
        json!(@object $object [$($key)+] (json!([$($array)*])) $($rest)*);
    };
    (@object $object:ident ($($key:tt)+) (: {$($map:tt)*} $($rest:tt)*) $copy:tt) => {
        json!(@object $object [$($key)+] (json!({$($map)*})) $($rest)*);
    };
    (@object $object:ident ($($key:tt)+) (: $value:expr , $($rest:tt)*) $copy:tt) => {
        json!(@object $object [$($key)+] (json!($value)) , $($rest)*);
    };
    (@object $object:ident ($($key:tt)+) (: $value:expr) $copy:tt) => {
        json!(@object $object [$($key)+] (json!($value)));
    };
    (@object $object:ident () (($key:expr) : $($rest:tt)*) $copy:tt) => {
        json!(@object $object ($key) (: $($rest)*) (: $($rest)*));
    };
    (@object $object:ident ($($key:tt)*) ($tt:tt $($rest:tt)*) $copy:tt) => {
        json!(@object $object ($($key)* $tt) ($($rest)*) ($($rest)*));
    };

    (null) => {
        serde_json::Value::Null
    };
    (true) => {
        serde_json::Value::Bool(true)
    };
    (false) => {
        serde_json::Value::Bool(false)
    };
    ([]) => {
        serde_json::Value::Array(vec![])
    };
    ([ $($tt:tt)+ ]) => {
        serde_json::Value::Array(json!(@array [] $($tt)+))
    };
    ({}) => {
        serde_json::Value::Object(serde_json::Map::new())
    };
    ({ $($tt:tt)+ }) => {
        serde_json::Value::Object({
            let mut object = $crate::kernel::demo::json::object();
            json!(@object object () ($($tt)+) ($($tt)+));
            object
        })
    };
    ($other:expr) => {
        $crate::kernel::demo::json::leaf(&$other)
    };
}

#[cfg(test)]
mod tests {
    /// Every shape the demo writes, against serde_json's own macro, as bytes (key order too).
    #[test]
    fn the_demo_json_macro_builds_what_serde_jsons_builds() {
        let (id, n, f, v) = (
            "t-1".to_string(),
            7u64,
            42.0f64,
            serde_json::json!({"x": [1]}),
        );
        let text: &str = "hi";
        let ours = json!({"b": null, "a": true, "c": false, "id": id, "n": n, "f": f, "v": v,
            "s": "lit", "t": text, "e": {}, "ea": [], "arr": [1, "two", null, {"k": [true, false]}, [f]],
            "nested": {"z": 1.0, "y": format!("{id}-x"), "z2": &id[..1]}, "a": "again"});
        let theirs = serde_json::json!({"b": null, "a": true, "c": false, "id": id, "n": n, "f": f, "v": v,
            "s": "lit", "t": text, "e": {}, "ea": [], "arr": [1, "two", null, {"k": [true, false]}, [f]],
            "nested": {"z": 1.0, "y": format!("{id}-x"), "z2": &id[..1]}, "a": "again"});
        assert_eq!(ours, theirs);
        assert_eq!(ours.to_string(), theirs.to_string());
        assert_eq!(json!([1, {"k": 2},]), serde_json::json!([1, {"k": 2},]));
        assert_eq!(json!("x"), serde_json::json!("x"));
    }
}
