//! The model's layers as the recorder saw them (`metadata.extra.model_layers`, the shim's
//! `dtypes` line): its linear and embedding layers, for the remedies that change particular
//! weights: LoRA (adapters on the repeated blocks' linear layers, every weight frozen) and tied
//! embeddings (an output head sharing the input embedding's weight).

use vramscope_trace_format::Trace;

use super::parts::repeated_block;

/// LoRA's rank when the user has not chosen one: peft's `LoraConfig` default.
pub const LORA_RANK: u64 = 8;

/// A linear or an embedding layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    /// `true`: an embedding (`rows` entries of `columns` each); else a linear layer (`rows` in,
    /// `columns` out).
    pub embedding: bool,
    /// The module's qualified name.
    pub module: String,
    /// Its weight's parameter name (a shared weight is named by its first module).
    pub weight: String,
    pub rows: u64,
    pub columns: u64,
    /// Whether its weight has `requires_grad`.
    pub trainable: bool,
}

/// The layers of the trace's model, empty when the recorder did not write them.
pub fn layers(trace: &Trace) -> Vec<Layer> {
    let Some(rows) = trace.metadata.extra.get("model_layers").and_then(|v| v.as_array()) else { return Vec::new() };
    rows.iter()
        .filter_map(|row| {
            let row = row.as_array()?;
            let text = |i: usize| row.get(i).and_then(|v| v.as_str()).map(str::to_owned);
            let number = |i: usize| row.get(i).and_then(serde_json::Value::as_u64);
            Some(Layer {
                embedding: text(0)? == "embedding",
                module: text(1)?,
                weight: text(2)?,
                rows: number(3)?,
                columns: number(4)?,
                trainable: row.get(5).and_then(serde_json::Value::as_bool)?,
            })
        })
        .collect()
}

/// An output head that could share the input embedding's weight: a linear layer from the
/// embedding's width to its entries whose weight is a parameter of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Untied {
    /// The embedding's weight.
    pub embedding: String,
    /// The head's weight, which tying removes (with its gradient and optimizer state).
    pub head: String,
    /// Elements of the head's weight.
    pub elements: u64,
}

/// The untied head, if the model has one that is trained (a frozen head has no gradient or
/// state to save, and a model that ties already names one weight for both).
pub fn untied_head(layers: &[Layer]) -> Option<Untied> {
    layers.iter().filter(|e| e.embedding && e.trainable).find_map(|e| {
        // Outside the repeated blocks (an MLP's projection can have the shape too), the last.
        let head = layers.iter().rev().find(|l| {
            !l.embedding
                && l.trainable
                && repeated_block(&l.module).is_none()
                && l.rows == e.columns
                && l.columns == e.rows
                && l.weight != e.weight
        })?;
        Some(Untied { embedding: e.weight.clone(), head: head.weight.clone(), elements: head.rows * head.columns })
    })
}

/// What LoRA would adapt: the trainable linear layers inside the model's repeated blocks.
#[derive(Clone, Debug, PartialEq)]
pub struct Adapters {
    /// Linear layers adapted.
    pub layers: usize,
    /// The rank.
    pub rank: u64,
    /// Elements of all the adapters: `rank x (in + out)` for each layer.
    pub elements: u64,
}

/// LoRA's adapters on `layers`, when the model has linear layers in repeated blocks and trains
/// most of its weights (a model that trains under half of its linear weights is fine-tuned
/// with adapters, or frozen, already).
pub fn adapters(layers: &[Layer]) -> Option<Adapters> {
    let linear: Vec<&Layer> = layers.iter().filter(|l| !l.embedding).collect();
    let elements = |l: &&Layer| l.rows * l.columns;
    let all: u64 = linear.iter().map(elements).sum();
    let trainable: u64 = linear.iter().filter(|l| l.trainable).map(elements).sum();
    if all == 0 || trainable * 2 < all {
        return None;
    }
    let targets: Vec<&&Layer> = linear.iter().filter(|l| l.trainable && repeated_block(&l.module).is_some()).collect();
    (!targets.is_empty()).then(|| Adapters {
        layers: targets.len(),
        rank: LORA_RANK,
        elements: targets.iter().map(|l| LORA_RANK * (l.rows + l.columns)).sum(),
    })
}

/// The share of the linear layers' weights that are trained (1 when none were written).
pub fn trainable_share(layers: &[Layer]) -> f64 {
    let linear = layers.iter().filter(|l| !l.embedding);
    let (mut all, mut trainable) = (0u64, 0u64);
    for l in linear {
        all += l.rows * l.columns;
        if l.trainable {
            trainable += l.rows * l.columns;
        }
    }
    if all == 0 { 1.0 } else { trainable as f64 / all as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(embedding: bool, module: &str, rows: u64, columns: u64, trainable: bool) -> Layer {
        Layer { embedding, module: module.to_owned(), weight: format!("{module}.weight"), rows, columns, trainable }
    }

    #[test]
    fn a_head_the_embeddings_shape_transposed_is_untied() {
        let mut layers = vec![
            layer(true, "tok_emb", 512, 128, true),
            layer(true, "pos_emb", 64, 128, true),
            layer(false, "blocks.0.attn.q_proj", 128, 128, true),
            // The block's MLP has the head's shape: not the head.
            layer(false, "blocks.0.mlp.fc_in", 128, 512, true),
            layer(false, "lm_head", 128, 512, true),
        ];
        let untied = untied_head(&layers).expect("untied");
        assert_eq!(
            (untied.embedding.as_str(), untied.head.as_str(), untied.elements),
            ("tok_emb.weight", "lm_head.weight", 65_536)
        );
        // Tied: the head's weight is the embedding's.
        layers[4].weight = "tok_emb.weight".to_owned();
        assert_eq!(untied_head(&layers), None);
    }

    #[test]
    fn adapters_go_on_the_blocks_linear_layers_of_a_model_that_trains_its_weights() {
        let mut layers = vec![
            layer(false, "blocks.0.attn.q_proj", 128, 128, true),
            layer(false, "blocks.0.mlp.fc_in", 128, 512, true),
            layer(false, "blocks.1.attn.q_proj", 128, 128, true),
            layer(false, "lm_head", 128, 512, true),
        ];
        let a = adapters(&layers).expect("adapters");
        // 8 x (128 + 128) twice, 8 x (128 + 512) once; the head is outside the blocks.
        assert_eq!((a.layers, a.elements), (3, 8 * 256 * 2 + 8 * 640));
        // Most weights frozen: adapters already (or nothing trained).
        for l in &mut layers {
            l.trainable = l.module == "blocks.0.attn.q_proj";
        }
        assert_eq!(adapters(&layers), None);
        assert!((trainable_share(&layers) - 16_384.0 / 163_840.0).abs() < 1e-9);
    }
}
