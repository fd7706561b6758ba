from typing import Any

from django.core.management.base import BaseCommand

from datasets.choices import DatasetKind
from datasets.models import PublicDataset
from datasets.services import public_dataset_upsert

M, D = DatasetKind.MODEL, DatasetKind.DATASET
HF = "https://huggingface.co"

# id, kind, name, version, size in bytes, licence, directory, homepage, tags, description.
# Sizes are those of the published files (safetensors / bin shards, archives) as stored.
CATALOG: list[tuple[str, str, str, str, int, str, str, str, str, str]] = [
    (
        "llama-3-8b-instruct",
        M,
        "Llama 3 8B Instruct",
        "3.0",
        16_060_522_496,
        "Llama 3 Community License",
        "Meta-Llama-3-8B-Instruct",
        f"{HF}/meta-llama/Meta-Llama-3-8B-Instruct",
        "llm, chat, meta, llama, english, 8k context",
        "Meta's 8B instruction-tuned model, bf16 safetensors, with tokenizer and chat template.",
    ),
    (
        "llama-3-70b-instruct",
        M,
        "Llama 3 70B Instruct",
        "3.0",
        141_107_412_992,
        "Llama 3 Community License",
        "Meta-Llama-3-70B-Instruct",
        f"{HF}/meta-llama/Meta-Llama-3-70B-Instruct",
        "llm, chat, meta, llama, english, 8k context",
        "Meta's 70B instruction-tuned model, bf16 safetensors; needs 2×80 GB GPUs or more in bf16.",
    ),
    (
        "baichuan2-7b-chat",
        M,
        "Baichuan 2 7B Chat",
        "2.0",
        15_011_627_008,
        "Baichuan 2 Community License",
        "Baichuan2-7B-Chat",
        f"{HF}/baichuan-inc/Baichuan2-7B-Chat",
        "llm, chat, chinese, 中文, baichuan, 百川",
        "Baichuan 2 chat model trained on 2.6T tokens, strong on Chinese; fp16 weights.",
    ),
    (
        "baichuan2-13b-chat",
        M,
        "Baichuan 2 13B Chat",
        "2.0",
        27_793_616_896,
        "Baichuan 2 Community License",
        "Baichuan2-13B-Chat",
        f"{HF}/baichuan-inc/Baichuan2-13B-Chat",
        "llm, chat, chinese, 中文, baichuan, 百川",
        "The 13B Baichuan 2 chat model with ALiBi positions; fp16 weights.",
    ),
    (
        "qwen2-7b-instruct",
        M,
        "Qwen2 7B Instruct",
        "2.0",
        15_231_233_024,
        "Apache-2.0",
        "Qwen2-7B-Instruct",
        f"{HF}/Qwen/Qwen2-7B-Instruct",
        "llm, chat, chinese, 中文, qwen, 通义千问, multilingual, 128k context",
        "Alibaba's Qwen2 7B instruction-tuned model, bf16 safetensors, up to 128K context.",
    ),
    (
        "qwen2-72b-instruct",
        M,
        "Qwen2 72B Instruct",
        "2.0",
        145_412_407_296,
        "Tongyi Qianwen License",
        "Qwen2-72B-Instruct",
        f"{HF}/Qwen/Qwen2-72B-Instruct",
        "llm, chat, chinese, 中文, qwen, 通义千问, multilingual, 128k context",
        "Alibaba's flagship Qwen2 72B instruction-tuned model, bf16 safetensors.",
    ),
    (
        "chatglm3-6b",
        M,
        "ChatGLM3-6B",
        "3.0",
        12_487_168_000,
        "ChatGLM3-6B Model License",
        "chatglm3-6b",
        f"{HF}/THUDM/chatglm3-6b",
        "llm, chat, chinese, 中文, glm, zhipu, 智谱, tools",
        "Zhipu AI and Tsinghua KEG's bilingual 6B chat model with tool calling; "
        "runs on one 24 GB GPU.",
    ),
    (
        "mistral-7b-instruct-v0-2",
        M,
        "Mistral 7B Instruct",
        "v0.2",
        14_483_498_016,
        "Apache-2.0",
        "Mistral-7B-Instruct-v0.2",
        f"{HF}/mistralai/Mistral-7B-Instruct-v0.2",
        "llm, chat, mistral, english, 32k context",
        "Mistral AI's 7B instruction-tuned model with a 32K context window, bf16 safetensors.",
    ),
    (
        "bge-large-zh-v1-5",
        M,
        "BGE large zh (embeddings)",
        "v1.5",
        1_302_134_568,
        "MIT",
        "bge-large-zh-v1.5",
        f"{HF}/BAAI/bge-large-zh-v1.5",
        "embeddings, retrieval, rag, chinese, 中文, bge, baai, 智源",
        "BAAI's Chinese text embedding model (1024 dimensions) for retrieval and RAG.",
    ),
    (
        "wudaocorpora-text",
        D,
        "WuDaoCorpora Text (open subset)",
        "2.0",
        200_470_855_680,
        "WuDaoCorpora Agreement (research only)",
        "WuDaoCorpus2.0_base_200G",
        "https://data.baai.ac.cn/details/WuDaoCorporaText",
        "pretraining, corpus, chinese, 中文, 悟道, baai, 智源, web text",
        "The openly released 200 GB part of BAAI's cleaned Chinese web corpus, as JSON lines.",
    ),
    (
        "clue-corpus-small",
        D,
        "CLUECorpusSmall",
        "2020",
        14_029_602_816,
        "Research use only",
        "CLUECorpusSmall",
        "https://github.com/CLUEbenchmark/CLUECorpus2020",
        "pretraining, corpus, chinese, 中文, clue, news, wiki, comments",
        "14 GB of Chinese pretraining text from CLUE: news, web text, Wikipedia and comments.",
    ),
    (
        "belle-instructions",
        D,
        "BELLE instruction sets (zh)",
        "2023-04",
        5_621_293_056,
        "GPL-3.0 (research use only)",
        "BELLE",
        "https://github.com/LianjiaTech/BELLE",
        "instruction tuning, sft, chinese, 中文, belle, 指令",
        "BELLE's generated Chinese instruction data: train_0.5M_CN, 1M, 2M and 3.5M sets.",
    ),
    (
        "alpaca-gpt4-zh",
        D,
        "Alpaca-GPT4 (Chinese)",
        "2023-04",
        35_126_702,
        "CC BY-NC 4.0",
        "alpaca-gpt4-zh",
        "https://github.com/Instruction-Tuning-with-GPT-4/GPT-4-LLM",
        "instruction tuning, sft, chinese, 中文, alpaca, gpt-4",
        "52K Alpaca instructions translated to Chinese and answered by GPT-4, in one JSON file.",
    ),
    (
        "coig",
        D,
        "COIG",
        "v1",
        258_476_032,
        "Apache-2.0",
        "COIG",
        f"{HF}/datasets/BAAI/COIG",
        "instruction tuning, sft, chinese, 中文, coig, baai, exam, code",
        "Chinese Open Instruction Generalist: human-verified instructions, exams, code and "
        "value alignment data.",
    ),
    (
        "imagenet-1k",
        D,
        "ImageNet-1k (ILSVRC 2012)",
        "ILSVRC2012",
        154_642_401_280,
        "ImageNet terms of access (non-commercial research)",
        "ImageNet-1k",
        "https://image-net.org/challenges/LSVRC/2012/",
        "vision, image classification, imagenet, ilsvrc, 图像",
        "1.28M training and 50K validation images in 1,000 classes, extracted in class folders.",
    ),
    (
        "c4-en-subset",
        D,
        "C4 English (subset)",
        "3.0.1",
        41_131_827_200,
        "ODC-By 1.0",
        "c4-en",
        f"{HF}/datasets/allenai/c4",
        "pretraining, corpus, english, web text, c4",
        "The first 128 of 1,024 training shards of C4 'en' plus its validation split, json.gz.",
    ),
]

# id → the description in Simplified Chinese.
DESCRIPTIONS_ZH = {
    "llama-3-8b-instruct": "Meta 的 8B 指令微调模型（bf16 safetensors），含分词器与对话模板。",
    "llama-3-70b-instruct": (
        "Meta 的 70B 指令微调模型，bf16 safetensors 格式；bf16 推理需 2 张 80 GB 或更多 GPU。"
    ),
    "baichuan2-7b-chat": "百川 2 对话模型，训练语料 2.6 万亿 token，中文能力强；fp16 权重。",
    "baichuan2-13b-chat": "采用 ALiBi 位置编码的 13B 百川 2 对话模型；fp16 权重。",
    "qwen2-7b-instruct": (
        "阿里巴巴通义千问 Qwen2 7B 指令微调模型，bf16 safetensors 格式，上下文最长 128K。"
    ),
    "qwen2-72b-instruct": "阿里巴巴通义千问旗舰模型 Qwen2 72B 指令微调版，bf16 safetensors 格式。",
    "chatglm3-6b": (
        "智谱 AI 与清华 KEG 的 6B 中英双语对话模型，支持工具调用；单张 24 GB GPU 即可运行。"
    ),
    "mistral-7b-instruct-v0-2": (
        "Mistral AI 的 7B 指令微调模型，32K 上下文窗口，bf16 safetensors 格式。"
    ),
    "bge-large-zh-v1-5": "智源研究院（BAAI）的中文文本向量模型（1024 维），用于检索与 RAG。",
    "wudaocorpora-text": (
        "智源研究院清洗后的中文网页语料中公开发布的 200 GB 部分，JSON Lines 格式。"
    ),
    "clue-corpus-small": "CLUE 的 14 GB 中文预训练文本：新闻、网页、维基百科与评论。",
    "belle-instructions": "BELLE 生成的中文指令数据：train_0.5M_CN、1M、2M 与 3.5M 四个数据集。",
    "alpaca-gpt4-zh": "5.2 万条 Alpaca 指令译成中文并由 GPT-4 作答，单个 JSON 文件。",
    "coig": "中文开放通用指令集（COIG）：经人工校验的指令、考试、代码与价值对齐数据。",
    "imagenet-1k": "1,000 个类别的 128 万张训练图像与 5 万张验证图像，按类别目录解压。",
    "c4-en-subset": "C4 'en' 1,024 个训练分片中的前 128 个及其验证集，json.gz 格式。",
}

# id → the name in Simplified Chinese, where it is more than a proper name.
NAMES_ZH = {
    "bge-large-zh-v1-5": "BGE large zh（文本向量）",
    "wudaocorpora-text": "悟道文本语料（公开部分）",
    "belle-instructions": "BELLE 中文指令数据集",
    "alpaca-gpt4-zh": "Alpaca-GPT4（中文）",
    "c4-en-subset": "C4 英文（子集）",
}

# A licence's English name → its name in Simplified Chinese (SPDX ids such as Apache-2.0 and
# CC BY-NC 4.0 stay as they are).
LICENCES_ZH = {
    "Llama 3 Community License": "Llama 3 社区许可协议",
    "Baichuan 2 Community License": "百川 2 社区许可协议",
    "Tongyi Qianwen License": "通义千问许可协议",
    "ChatGLM3-6B Model License": "ChatGLM3-6B 模型许可协议",
    "WuDaoCorpora Agreement (research only)": "悟道语料使用协议（仅限研究）",
    "Research use only": "仅限研究使用",
    "GPL-3.0 (research use only)": "GPL-3.0（仅限研究使用）",
    "ImageNet terms of access (non-commercial research)": "ImageNet 访问条款（非商业研究）",
}


class Command(BaseCommand):
    help = "Seed the public pool's catalog of datasets and models. Safe to run repeatedly."

    def handle(self, *args: Any, **options: Any) -> None:
        created_count = 0
        for sort, row in enumerate(CATALOG):
            key, kind, name, version, size, licence, directory, homepage, tags, text = row
            _entry, created = public_dataset_upsert(
                dataset_id=key,
                values={
                    "kind": kind,
                    "name": name,
                    "name_zh_hans": NAMES_ZH.get(key, ""),
                    "version": version,
                    "size_bytes": size,
                    "licence": licence,
                    "licence_zh_hans": LICENCES_ZH.get(licence, ""),
                    "directory": directory,
                    "homepage": homepage,
                    "tags": tags,
                    "description": text,
                    "description_zh_hans": DESCRIPTIONS_ZH.get(key, ""),
                },
                initial={"sort": sort * 10, "active": True},
            )
            created_count += created
        self.stdout.write(
            f"Public pool: {PublicDataset.objects.count()} datasets and models "
            f"({created_count} new, {len(CATALOG) - created_count} updated)."
        )
