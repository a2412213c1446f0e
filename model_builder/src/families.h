// families.h - one builder per model family (model_builder only).
#pragma once

#include "neusight/model_builder.h"

namespace neusight::builder {

LoadedModel build_gpt2(const ModelConfig& c);
LoadedModel build_bert(const ModelConfig& c);
LoadedModel build_vit(const ModelConfig& c);
LoadedModel build_clip(const ModelConfig& c);
LoadedModel build_clip_text(const ModelConfig& c);
LoadedModel build_opt(const ModelConfig& c);
LoadedModel build_switch(const ModelConfig& c);
// T5 and mT5 generation (BuildOptions): the prefill (last_logits: the encoder over the prompt,
// the decoder over its start token) or a decode step (kv_cache: past_key_values.N.decoder.key /
// .value, the self-attention cache of past_sequence, and .encoder.key / .value, the
// cross-attention keys of encoder_sequence). InputError for Switch and encoder-only configs.
LoadedModel build_t5_generation(const ModelConfig& c, const BuildOptions& o);
LoadedModel build_whisper(const ModelConfig& c);
LoadedModel build_bart(const ModelConfig& c);
LoadedModel build_distilbert(const ModelConfig& c);
LoadedModel build_electra(const ModelConfig& c);
LoadedModel build_albert(const ModelConfig& c);
LoadedModel build_mpnet(const ModelConfig& c);
LoadedModel build_modernbert(const ModelConfig& c);
LoadedModel build_deberta_v2(const ModelConfig& c);
// Whisper's prefill (the encoder over 30 s of audio, the decoder over the prompt's tokens) or a
// decode step (past_key_values.N.decoder.* of past_sequence, .encoder.* of encoder_sequence).
LoadedModel build_whisper_generation(const ModelConfig& c, const BuildOptions& o);
LoadedModel build_bart_generation(const ModelConfig& c, const BuildOptions& o);
LoadedModel build_llama(const ModelConfig& c, const BuildOptions& o);

}  // namespace neusight::builder
