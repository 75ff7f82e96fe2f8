"""Generator service: two sequential calls per question (plain, then legal), honestly labelled.

Public API: ``services.generator.service.Generator(settings).generate(GenerateRequest) -> GenerateResult``.
"""
