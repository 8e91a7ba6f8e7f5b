import functools

import chz
import tinker

from recipes_lib.cli import run_recipe
from renderers import Message, Renderer
from rl import train
from rl.dataset import ListRLDataset, RepeatedEnvGroupBuilder, renderer_for
from rl.types import Action, Env, RLDatasetBuilder, StepResult


class OneWordEnv(Env):
    def __init__(self, renderer: Renderer, topic: str):
        self.renderer, self.topic = renderer, topic

    async def initial_observation(self):  # the prompt's tokens, and where sampling stops
        question = Message(role="user", content=f"Name one {self.topic}. Answer in a single word.")
        return self.renderer.build_generation_prompt([question]), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:  # score the sampled tokens
        message, finished = self.renderer.parse_response(action)
        reward = float(finished and len(message["content"].split()) == 1)
        return StepResult(reward, episode_done=True, next_observation=tinker.types.ModelInput.empty(),
                          next_stop_condition=[], metrics={"one_word": reward})


@chz.chz
class OneWordDatasetBuilder(RLDatasetBuilder):
    model_name: str

    async def __call__(self):  # (training dataset, optional test dataset)
        groups = [RepeatedEnvGroupBuilder(functools.partial(OneWordEnv, renderer_for(self.model_name), topic), 4)
                  for topic in ["fruit", "colour", "animal", "country", "planet", "tool", "flower", "metal"]]
        return ListRLDataset(groups, batch_size=4), None  # 2 batches of 4 topics, 4 samples each


@chz.chz
class Config:
    model_name: str = "HuggingFaceTB/SmolLM2-135M-Instruct"
    log_path: str = "/tmp/one-word"


def main(config: Config) -> None:
    train.main(train.Config(log_path=config.log_path, model_name=config.model_name, learning_rate=1e-4,
                            max_tokens=8, dataset_builder=OneWordDatasetBuilder(model_name=config.model_name)))


if __name__ == "__main__":  # key=value settings (--help lists them); the local engine serves from this thread
    run_recipe(main, chz.Blueprint(Config))
