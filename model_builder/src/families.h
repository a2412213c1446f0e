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
LoadedModel build_llama(const ModelConfig& c, const BuildOptions& o);

}  // namespace neusight::builder
