//! Serde for [`TieringConfig`] as the configuration file's `[engine]` table: the engine's keys,
//! with the policy's table nested under `policy`.
//!
//! Two types in one table cannot be derived: `#[serde(flatten)]` buffers the values, which
//! silently accepts misspelt keys under `deny_unknown_fields` and loses the TOML spans errors
//! point at. Instead the engine's derived implementation runs over the table itself, with the
//! `policy` key taken out on the way in and put back on the way out.

use std::fmt;

use serde::{
    Deserialize, Deserializer, Serialize, Serializer,
    de::{self, DeserializeSeed, IntoDeserializer as _, MapAccess, Visitor},
    ser::{self, Impossible, SerializeStruct},
};

use super::TieringConfig;
use crate::policy::PolicyConfig;

/// The key the policy's table sits under.
const NESTED: &str = "policy";

impl Serialize for TieringConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.engine.serialize(WithNested {
            inner: serializer,
            nested: &self.policy,
        })
    }
}

impl<'de> Deserialize<'de> for TieringConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(TableVisitor)
    }
}

struct TableVisitor;

impl<'de> Visitor<'de> for TableVisitor {
    type Value = TieringConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the [engine] table")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TieringConfig, A::Error> {
        let mut policy = None;
        let engine = crate::engine::EngineConfig::deserialize(WithoutNested {
            map,
            nested: &mut policy,
        })?;
        Ok(TieringConfig {
            engine,
            policy: policy.unwrap_or_default(),
        })
    }
}

/// The table as the engine's derived `Deserialize` sees it: every key but `policy`, whose
/// value goes to `nested`.
struct WithoutNested<'p, A> {
    map: A,
    nested: &'p mut Option<PolicyConfig>,
}

impl<'de, A: MapAccess<'de>> Deserializer<'de> for WithoutNested<'_, A> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for WithoutNested<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        mut seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            // The key is read inside the format's own key deserializer, so an unknown key is
            // reported where it stands in the file.
            match self.map.next_key_seed(KeySeed(seed))? {
                None => return Ok(None),
                Some(Key::Engine(key)) => return Ok(Some(key)),
                Some(Key::Nested(unused)) => {
                    if self.nested.is_some() {
                        return Err(de::Error::duplicate_field(NESTED));
                    }
                    *self.nested = Some(self.map.next_value()?);
                    seed = unused;
                }
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// A key of the table: one of the engine's (decoded by its seed), or the nested table's, which
/// hands the unused seed back for the next key.
enum Key<K, V> {
    Engine(V),
    Nested(K),
}

struct KeySeed<K>(K);

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<K> {
    type Value = Key<K, K::Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_identifier(KeyVisitor(self.0))
    }
}

struct KeyVisitor<K>(K);

impl<'de, K: DeserializeSeed<'de>> Visitor<'de> for KeyVisitor<K> {
    type Value = Key<K, K::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key of the [engine] table")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        if key == NESTED {
            Ok(Key::Nested(self.0))
        } else {
            self.0.deserialize(key.into_deserializer()).map(Key::Engine)
        }
    }
}

/// A serializer that takes the engine's struct and writes it with one more field, `policy`.
struct WithNested<'p, S> {
    inner: S,
    nested: &'p PolicyConfig,
}

struct StructWithNested<'p, S> {
    inner: S,
    nested: &'p PolicyConfig,
}

impl<S: SerializeStruct> SerializeStruct for StructWithNested<'_, S> {
    type Ok = S::Ok;
    type Error = S::Error;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), S::Error> {
        self.inner.serialize_field(key, value)
    }

    fn end(mut self) -> Result<S::Ok, S::Error> {
        self.inner.serialize_field(NESTED, self.nested)?;
        self.inner.end()
    }
}

/// Every other kind of value: the engine's configuration is a struct, so these never run.
fn not_a_struct<E: ser::Error>() -> E {
    E::custom("the [engine] table serializes from a struct")
}

macro_rules! not_a_struct {
    ($($method:ident($($arg:ty),*);)*) => {
        $(fn $method(self, $(_: $arg),*) -> Result<S::Ok, S::Error> {
            Err(not_a_struct())
        })*
    };
}

impl<'p, S: Serializer> Serializer for WithNested<'p, S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Impossible<S::Ok, S::Error>;
    type SerializeTuple = Impossible<S::Ok, S::Error>;
    type SerializeTupleStruct = Impossible<S::Ok, S::Error>;
    type SerializeTupleVariant = Impossible<S::Ok, S::Error>;
    type SerializeMap = Impossible<S::Ok, S::Error>;
    type SerializeStruct = StructWithNested<'p, S::SerializeStruct>;
    type SerializeStructVariant = Impossible<S::Ok, S::Error>;

    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        Ok(StructWithNested {
            inner: self.inner.serialize_struct(name, len + 1)?,
            nested: self.nested,
        })
    }

    not_a_struct! {
        serialize_bool(bool); serialize_i8(i8); serialize_i16(i16); serialize_i32(i32);
        serialize_i64(i64); serialize_u8(u8); serialize_u16(u16); serialize_u32(u32);
        serialize_u64(u64); serialize_f32(f32); serialize_f64(f64); serialize_char(char);
        serialize_str(&str); serialize_bytes(&[u8]); serialize_none(); serialize_unit();
        serialize_unit_struct(&'static str);
        serialize_unit_variant(&'static str, u32, &'static str);
    }

    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<S::Ok, S::Error> {
        Err(ser::Error::custom(
            "the [engine] table serializes from a struct",
        ))
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<S::Ok, S::Error> {
        Err(ser::Error::custom(
            "the [engine] table serializes from a struct",
        ))
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<S::Ok, S::Error> {
        Err(ser::Error::custom(
            "the [engine] table serializes from a struct",
        ))
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        Err(ser::Error::custom(
            "the [engine] table serializes from a struct",
        ))
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, S::Error> {
        Err(ser::Error::custom(
            "the [engine] table serializes from a struct",
        ))
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        Err(ser::Error::custom(
            "the [engine] table serializes from a struct",
        ))
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        Err(ser::Error::custom(
            "the [engine] table serializes from a struct",
        ))
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        Err(ser::Error::custom(
            "the [engine] table serializes from a struct",
        ))
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        Err(ser::Error::custom(
            "the [engine] table serializes from a struct",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_table_round_trips_with_the_policy_nested() {
        let mut config = TieringConfig::default();
        config.engine.interval_ms = 25;
        config.policy.epoch.min_ms = 7;
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(json["interval_ms"], 25);
        assert_eq!(json["policy"]["epoch"]["min_ms"], 7);
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let engine_keys = serde_json::to_value(&config.engine).unwrap();
        assert_eq!(
            keys.len(),
            engine_keys.as_object().unwrap().len() + 1,
            "every engine key, and `policy`: {keys:?}"
        );
        let back: TieringConfig = serde_json::from_value(json).unwrap();
        assert_eq!(back, config);
    }

    #[test]
    fn missing_keys_take_their_defaults_and_unknown_ones_are_refused() {
        let config: TieringConfig =
            serde_json::from_str(r#"{"top_n": 5, "policy": {"rw": {"window": 4}}}"#).unwrap();
        assert_eq!(config.engine.top_n, 5);
        assert_eq!(config.policy.rw.window, 4);
        assert_eq!(
            config.engine.interval_ms,
            TieringConfig::default().engine.interval_ms
        );
        let empty: TieringConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, TieringConfig::default());
        for bad in [
            r#"{"interval_msec": 5}"#,
            r#"{"policy": {"nope": 1}}"#,
            r#"{"policy": {}, "policy": {}}"#,
            r#"{"policy": 3}"#,
        ] {
            assert!(
                serde_json::from_str::<TieringConfig>(bad).is_err(),
                "{bad} was accepted"
            );
        }
    }
}
