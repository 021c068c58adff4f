//! The keys of a snapshot's dicts, interned once when the sink starts, and what each names: a
//! field of a frame, a trace entry, a block or a segment, or an entry's action.

use super::entries::Action;
use crate::import::pickle::Value;
use crate::model::event::EventKind;
use crate::model::ids::StringId;
use crate::model::interner::Interner;

/// The keys the sink reads, as a small number to `match` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field {
    Other,
    Action,
    Addr,
    Size,
    Stream,
    TimeUs,
    Frames,
    CompileContext,
    UserMetadata,
    DeviceFree,
    Name,
    Filename,
    Line,
    TotalSize,
    State,
    History,
    FxNodeOp,
    FxNodeName,
    FxNodeTarget,
    FxOriginalTrace,
    Stage,
    Device,
}

/// Keys are interned first, so their ids are small: a table indexed by id names the field.
pub(super) const FIELD_TABLE_LEN: usize = 64;

/// Interned key and value strings the sink compares against.
pub(super) struct Keys {
    /// Field of each string id below [`FIELD_TABLE_LEN`].
    pub(super) fields: [Field; FIELD_TABLE_LEN],
    /// Action of each string id below [`FIELD_TABLE_LEN`].
    pub(super) action_of: [Option<Action>; FIELD_TABLE_LEN],
    pub(super) action: StringId,
    pub(super) addr: StringId,
    pub(super) address: StringId,
    pub(super) size: StringId,
    pub(super) stream: StringId,
    pub(super) time_us: StringId,
    pub(super) frames: StringId,
    pub(super) compile_context: StringId,
    pub(super) user_metadata: StringId,
    pub(super) device_free: StringId,
    pub(super) name: StringId,
    pub(super) filename: StringId,
    pub(super) line: StringId,
    pub(super) device: StringId,
    pub(super) total_size: StringId,
    pub(super) requested_size: StringId,
    pub(super) state: StringId,
    pub(super) blocks: StringId,
    pub(super) segment_type: StringId,
    pub(super) segment_pool_id: StringId,
    pub(super) is_expandable: StringId,
    pub(super) history: StringId,
    pub(super) real_size: StringId,
    pub(super) fx_node_op: StringId,
    pub(super) fx_node_name: StringId,
    pub(super) fx_node_target: StringId,
    pub(super) fx_original_trace: StringId,
    pub(super) stage: StringId,
    pub(super) actions: [(StringId, Action); 10],
    pub(super) active_allocated: StringId,
    pub(super) active_pending_free: StringId,
    pub(super) inactive: StringId,
    pub(super) small: StringId,
    pub(super) large: StringId,
}

impl Keys {
    pub(super) fn new(i: &mut Interner) -> Self {
        let mut keys = Self::intern(i);
        let named = [
            (keys.action, Field::Action),
            (keys.addr, Field::Addr),
            (keys.size, Field::Size),
            (keys.stream, Field::Stream),
            (keys.time_us, Field::TimeUs),
            (keys.frames, Field::Frames),
            (keys.compile_context, Field::CompileContext),
            (keys.user_metadata, Field::UserMetadata),
            (keys.device_free, Field::DeviceFree),
            (keys.name, Field::Name),
            (keys.filename, Field::Filename),
            (keys.line, Field::Line),
            (keys.total_size, Field::TotalSize),
            (keys.state, Field::State),
            (keys.history, Field::History),
            (keys.fx_node_op, Field::FxNodeOp),
            (keys.fx_node_name, Field::FxNodeName),
            (keys.fx_node_target, Field::FxNodeTarget),
            (keys.fx_original_trace, Field::FxOriginalTrace),
            (keys.stage, Field::Stage),
            (keys.device, Field::Device),
        ];
        for (id, field) in named {
            if let Some(slot) = keys.fields.get_mut(id.index()) {
                *slot = field;
            }
        }
        for (id, action) in keys.actions {
            if let Some(slot) = keys.action_of.get_mut(id.index()) {
                *slot = Some(action);
            }
        }
        keys
    }

    #[inline]
    pub(super) fn field(&self, key: Value) -> Field {
        match key {
            Value::Str(id) => self.fields.get(id.index()).copied().unwrap_or(Field::Other),
            _ => Field::Other,
        }
    }

    pub(super) fn action(&self, id: StringId) -> Action {
        self.action_of.get(id.index()).copied().flatten().unwrap_or(Action::Unknown(id))
    }

    pub(super) fn intern(i: &mut Interner) -> Self {
        Self {
            fields: [Field::Other; FIELD_TABLE_LEN],
            action_of: [None; FIELD_TABLE_LEN],
            action: i.string("action"),
            addr: i.string("addr"),
            address: i.string("address"),
            size: i.string("size"),
            stream: i.string("stream"),
            time_us: i.string("time_us"),
            frames: i.string("frames"),
            compile_context: i.string("compile_context"),
            user_metadata: i.string("user_metadata"),
            device_free: i.string("device_free"),
            name: i.string("name"),
            filename: i.string("filename"),
            line: i.string("line"),
            device: i.string("device"),
            total_size: i.string("total_size"),
            requested_size: i.string("requested_size"),
            state: i.string("state"),
            blocks: i.string("blocks"),
            segment_type: i.string("segment_type"),
            segment_pool_id: i.string("segment_pool_id"),
            is_expandable: i.string("is_expandable"),
            history: i.string("history"),
            real_size: i.string("real_size"),
            fx_node_op: i.string("fx_node_op"),
            fx_node_name: i.string("fx_node_name"),
            fx_node_target: i.string("fx_node_target"),
            fx_original_trace: i.string("fx_original_trace"),
            stage: i.string("stage"),
            actions: [
                (i.string("alloc"), Action::Event(EventKind::Alloc)),
                (i.string("free_requested"), Action::Event(EventKind::FreeRequested)),
                (i.string("free_completed"), Action::Event(EventKind::FreeCompleted)),
                (i.string("segment_alloc"), Action::Event(EventKind::SegmentAlloc)),
                (i.string("segment_free"), Action::Event(EventKind::SegmentFree)),
                (i.string("segment_map"), Action::Event(EventKind::SegmentMap)),
                (i.string("segment_unmap"), Action::Event(EventKind::SegmentUnmap)),
                (i.string("snapshot"), Action::Snapshot),
                (i.string("oom"), Action::Oom),
                (i.string("annotate"), Action::Annotate),
            ],
            active_allocated: i.string("active_allocated"),
            active_pending_free: i.string("active_pending_free"),
            inactive: i.string("inactive"),
            small: i.string("small"),
            large: i.string("large"),
        }
    }
}

/// An integer field's value, or why it is not one.
pub(super) fn int_field(name: &str, value: Value) -> Result<u64, String> {
    value.as_u64().ok_or_else(|| match value {
        Value::BigInt => format!("'{name}' is an integer wider than 64 bits, more than any address or size can be"),
        Value::Int(v) => format!("'{name}' should be a non-negative integer, found {v}"),
        Value::Float(v) => format!("'{name}' should be an integer, found the number {v}"),
        Value::Str(_) => format!("'{name}' should be an integer, found a string"),
        Value::None => format!("'{name}' should be an integer, found None"),
        other => format!("'{name}' should be a non-negative integer, found {other:?}"),
    })
}
