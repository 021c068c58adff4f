//! The fields of a Chrome trace's events as any writer spells them: numbers that may be
//! integers, floats or strings; the `[memory]` arguments; an event with only what is read.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A number as any JSON writer may spell it: an integer, a float, or a string holding one.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) enum Num {
    Int(i64),
    UInt(u64),
    Float(f64),
    /// Present but not a number.
    #[default]
    Other,
}

impl Num {
    pub(super) fn as_i64(self) -> Option<i64> {
        match self {
            Self::Int(v) => Some(v),
            Self::UInt(v) => i64::try_from(v).ok(),
            Self::Float(v) if v.fract() == 0.0 && v.abs() < 9.0e18 => Some(v as i64),
            _ => None,
        }
    }

    pub(super) fn as_u64(self) -> Option<u64> {
        match self {
            Self::Int(v) => u64::try_from(v).ok(),
            Self::UInt(v) => Some(v),
            Self::Float(v) if v.fract() == 0.0 && (0.0..1.8e19).contains(&v) => Some(v as u64),
            _ => None,
        }
    }

    pub(super) fn as_f64(self) -> Option<f64> {
        match self {
            Self::Int(v) => Some(v as f64),
            Self::UInt(v) => Some(v as f64),
            Self::Float(v) if v.is_finite() => Some(v),
            _ => None,
        }
    }

    pub(super) fn parse(text: &str) -> Self {
        let text = text.trim();
        if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            return u64::from_str_radix(hex, 16).map_or(Self::Other, Self::UInt);
        }
        if let Ok(v) = text.parse::<i64>() {
            Self::Int(v)
        } else if let Ok(v) = text.parse::<u64>() {
            Self::UInt(v)
        } else if let Ok(v) = text.parse::<f64>() {
            Self::Float(v)
        } else {
            Self::Other
        }
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Num, E> {
                Ok(Num::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Num, E> {
                Ok(Num::UInt(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Num, E> {
                Ok(Num::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Num, E> {
                Ok(Num::parse(v))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Num, E> {
                Ok(Num::Other)
            }
            fn visit_unit<E>(self) -> Result<Num, E> {
                Ok(Num::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Num, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Num::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Num, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Num::Other)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// The arguments of an event, as far as `[memory]` events use them; other keys are skipped and
/// the first few of their names kept (borrowed from the input), to say what a foreign schema is.
#[derive(Default)]
pub(super) struct Args<'a> {
    pub(super) addr: Option<Num>,
    pub(super) bytes: Option<Num>,
    pub(super) total_allocated: Option<Num>,
    pub(super) total_reserved: Option<Num>,
    pub(super) device_type: Option<Num>,
    pub(super) device_id: Option<Num>,
    pub(super) other_keys: [Option<Cow<'a, str>>; 4],
}

impl<'de: 'a, 'a> Deserialize<'de> for Args<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Args<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of arguments")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Args<'a>, A::Error> {
                let mut args = Args::default();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    let slot = match key.as_ref() {
                        "Addr" => &mut args.addr,
                        "Bytes" => &mut args.bytes,
                        // Nightlies of mid-2021 spelt the totals "Allocated Bytes" and "Reserved Bytes".
                        "Total Allocated" | "Allocated Bytes" => &mut args.total_allocated,
                        "Total Reserved" | "Reserved Bytes" => &mut args.total_reserved,
                        "Device Type" => &mut args.device_type,
                        "Device Id" => &mut args.device_id,
                        _ => {
                            if let Some(free) = args.other_keys.iter_mut().find(|k| k.is_none()) {
                                *free = Some(key);
                            }
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value::<Num>()?);
                }
                Ok(args)
            }
            // Arguments that are not an object (a foreign schema) count as none.
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Args<'a>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Args::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<Args<'a>, E> {
                Ok(Args::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<Args<'a>, E> {
                Ok(Args::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<Args<'a>, E> {
                Ok(Args::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<Args<'a>, E> {
                Ok(Args::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<Args<'a>, E> {
                Ok(Args::default())
            }
            fn visit_unit<E>(self) -> Result<Args<'a>, E> {
                Ok(Args::default())
            }
        }
        deserializer.deserialize_any(V(std::marker::PhantomData))
    }
}

/// One trace event, with only the fields read; the rest are skipped as the parser passes them.
#[derive(Deserialize)]
pub(super) struct RawEvent<'a> {
    #[serde(borrow, default)]
    pub(super) ph: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) name: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(super) ts: Option<Num>,
    #[serde(default)]
    pub(super) dur: Option<Num>,
    #[serde(default)]
    pub(super) pid: Option<Num>,
    #[serde(borrow, default)]
    pub(super) args: Option<Args<'a>>,
}
