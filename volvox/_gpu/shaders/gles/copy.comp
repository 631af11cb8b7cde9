#version 310 es
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

struct _4
{
    uint _m0;
    uint _m1;
    uint _m2;
    uint _m3;
    uint _m4;
    uint _m5;
    uint _m6;
    uint _m7;
    uint _m8;
};

layout(binding = 0, std430) readonly buffer _9_8
{
    float _m0[];
} _8;

layout(binding = 1, std430) buffer _12_11
{
    float _m0[];
} _11;

layout(binding = 2, std430) readonly buffer _15_14
{
    _4 _m0;
} _14;

uint _17(uint _19, uint _20)
{
    return _19 % ((_20 == 0u) ? 1u : _20);
}

uint _28(uint _29, uint _30)
{
    return _29 / ((_30 == 0u) ? 1u : _30);
}

void main()
{
    uint _59 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_59 >= _14._m0._m0)
    {
        return;
    }
    uint _68 = _17(_59, _14._m0._m1);
    uint _75 = _17(_28(_59, _14._m0._m1), _14._m0._m2);
    uint _81 = _28(_59, _14._m0._m1 * _14._m0._m2);
    _11._m0[((_14._m0._m6 + (_81 * _14._m0._m8)) + (_75 * _14._m0._m7)) + _68] = _8._m0[((_14._m0._m3 + (_81 * _14._m0._m5)) + (_75 * _14._m0._m4)) + _68];
}

